"""Secret fields in the admin: "set" / "not set" wherever the admin would show a value.

Forms already get a write-only input from the model field (``claw_platform.secret_forms``).
What is left is everything Django's admin displays by reading the attribute: the
read-only change page of a user who may not change the object (a member, a viewer),
fields listed in ``readonly_fields``, change-list columns, list filters (which list
the distinct values) and search (which would let one guess a value). This mixin puts
a status column in place of each secret field there, and drops secret fields from
filters and search. ``ClawAdminSite.register`` mixes it into every ModelAdmin and
inline it registers, so a new model's secret is covered without a line of admin code.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.text import capfirst

from claw_platform.secret_fields import secret_field_names, secret_fields, secret_status


def status_name(field_name: str) -> str:
    return f"secret_status_of_{field_name}"


def _status_display(field: Any) -> Any:
    def show(obj: Any) -> str:
        return secret_status(field.value_from_object(obj))

    show.short_description = capfirst(field.verbose_name)  # type: ignore[attr-defined]
    return show


class SecretFieldsAdminMixin:
    """For ModelAdmin and InlineModelAdmin subclasses."""

    model: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._secret_names = secret_field_names(self.model)
        for field in secret_fields(self.model):
            # An instance attribute: the admin's lookup_field() finds it by name.
            setattr(self, status_name(field.name), _status_display(field))

    def _shown(self, names: Any, hide: frozenset[str]) -> list[Any]:
        return [status_name(n) if isinstance(n, str) and n in hide else n for n in names]

    def _hidden_in_view(self, request: HttpRequest, obj: Any) -> frozenset[str]:
        """Secret fields displayed rather than edited on this page: all of them when
        the user may only view, else those listed as read-only."""
        if not self._secret_names:
            return frozenset()
        if not self.has_change_permission(request, obj):  # type: ignore[attr-defined]
            return self._secret_names
        readonly = set(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        return self._secret_names & readonly

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        names = super().get_readonly_fields(request, obj)  # type: ignore[misc]
        return self._shown(names, self._secret_names)

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        # A secret listed as read-only is shown as its status; the form must not
        # also offer it (Django excludes read-only fields by name, and the name
        # is now the status column's).
        excluded = super().get_exclude(request, obj)  # type: ignore[misc]
        readonly = self._secret_names & set(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        if not readonly:
            return excluded
        form_meta = getattr(getattr(self, "form", None), "_meta", None)
        base = list(excluded) if excluded is not None else list(getattr(form_meta, "exclude", None) or ())
        return [*base, *sorted(readonly)]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        names = super().get_fields(request, obj)  # type: ignore[misc]
        return self._shown(names, self._hidden_in_view(request, obj))

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        hide = self._hidden_in_view(request, obj)
        fieldsets = super().get_fieldsets(request, obj)  # type: ignore[misc]
        if not hide:
            return fieldsets
        shown = []
        for title, options in fieldsets:
            fields = [
                self._shown(line, hide) if isinstance(line, list | tuple) else self._shown([line], hide)[0]
                for line in options.get("fields", ())
            ]
            shown.append((title, {**options, "fields": fields}))
        return shown

    def get_list_display(self, request: HttpRequest) -> Any:
        names = super().get_list_display(request)  # type: ignore[misc]
        return self._shown(names, self._secret_names)

    def get_list_display_links(self, request: HttpRequest, list_display: Any) -> Any:
        links = super().get_list_display_links(request, list_display)  # type: ignore[misc]
        return self._shown(links, self._secret_names) if links else links

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = super().get_list_filter(request)  # type: ignore[misc]
        return [f for f in filters if not (isinstance(f, str) and f.split("__")[0] in self._secret_names)]

    def get_search_fields(self, request: HttpRequest) -> Any:
        fields = super().get_search_fields(request)  # type: ignore[misc]
        return [f for f in fields if f.lstrip("^=@").split("__")[0] not in self._secret_names]


def with_secret_fields_hidden(admin_class: type) -> type:
    """``admin_class`` with the mixin first in its bases (and in its inlines')."""
    if issubclass(admin_class, SecretFieldsAdminMixin):
        return admin_class
    inlines = [with_secret_fields_hidden(inline) for inline in getattr(admin_class, "inlines", ())]
    return type(
        admin_class.__name__,
        (SecretFieldsAdminMixin, admin_class),
        {"__module__": admin_class.__module__, "__qualname__": admin_class.__qualname__, "inlines": inlines},
    )
