"""Admin form fields for secrets: never sent back to the browser, blank keeps the old value."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from tools_app.models._common import check_header_names, check_secret_map, load_secret_map


class SecretMapFormMixin(forms.ModelForm):
    """For models with JSON-object secret fields listed in ``secret_map_fields``
    (name -> label): the form shows which keys are set, never their values; typing a
    new JSON object replaces the stored one; "clear" removes it."""

    secret_map_fields: dict[str, str] = {}
    header_fields: frozenset[str] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, label in self.secret_map_fields.items():
            stored = load_secret_map(getattr(self.instance, name, "") or "") if self.instance.pk else {}
            keys = ", ".join(sorted(stored)) or "none"
            self.fields[name] = forms.CharField(
                required=False,
                label=label,
                widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
                help_text=f"Stored encrypted; currently set: {keys}. Type a JSON object to replace them, "
                "or leave empty to keep them.",
            )
            self.fields[f"clear_{name}"] = forms.BooleanField(
                required=False, label=f"Remove the stored {label.lower()}"
            )
            self.initial[name] = ""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name, label in self.secret_map_fields.items():
            typed = (data.get(name) or "").strip()
            if data.get(f"clear_{name}"):
                data[name] = ""
            elif typed:
                try:
                    parsed = check_secret_map(typed, what=label)
                    if name in self.header_fields:
                        check_header_names(parsed, what=label)
                except ValidationError as exc:
                    self.add_error(name, exc)
                    continue
                data[name] = typed
            else:
                data[name] = (
                    getattr(type(self.instance)._base_manager.filter(pk=self.instance.pk).first(), name, "")
                    or ""
                )
            setattr(self.instance, name, data[name])
        return data


class SecretTextFormMixin(forms.ModelForm):
    """One plain secret (a webhook signing secret): write-only, blank keeps it."""

    secret_text_field = "secret"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        name = self.secret_text_field
        if name in self.fields:
            self.fields[name] = forms.CharField(
                required=False,
                widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
                help_text="Stored encrypted and never shown again. Leave empty to keep the current one.",
            )
            self.initial[name] = ""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        name = self.secret_text_field
        if name in data and not (data.get(name) or "").strip() and self.instance.pk:
            data[name] = (
                getattr(type(self.instance)._base_manager.filter(pk=self.instance.pk).first(), name, "") or ""
            )
            setattr(self.instance, name, data[name])
        return data
