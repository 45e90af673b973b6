"""The form field of every secret model field: write-only.

The widget renders an empty input, whether a value is set, and a "remove" box; never
the value, not even after a failed submit. Cleaning gives the typed text (replace),
``""`` (remove) or ``KEEP_SECRET`` (nothing typed: the model field's
``save_form_data`` leaves the stored value alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.utils import flatatt
from django.utils.html import format_html
from django.utils.safestring import SafeString

from claw_platform.secret_fields import KEEP_SECRET, secret_status


@dataclass(frozen=True)
class SecretEntry:
    """What the browser sent for one secret field."""

    typed: str
    remove: bool


def remove_name(name: str) -> str:
    # ``clear_<name>``: the name forms used before the widget drew the box itself.
    return f"clear_{name}"


class SecretWidget(forms.Widget):
    """An empty password input (or textarea) + "set" / "not set" + a remove box."""

    def __init__(self, *, multiline: bool = False, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.multiline = multiline

    def format_value(self, value: Any) -> None:
        return None  # the stored value is never rendered

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        final = self.build_attrs(self.attrs, attrs)
        final["autocomplete"] = "off" if self.multiline else "new-password"
        is_set = bool(value)
        attributes = flatatt({**final, "name": name})
        if self.multiline:
            field = format_html('<textarea{} rows="3" cols="60"></textarea>', attributes)
        else:
            field = format_html('<input type="password"{}>', attributes)
        status = format_html(
            '<div class="help secret-status">Stored encrypted: <strong>{}</strong>. '
            "Type a new value to replace it; leave empty to keep it.</div>",
            secret_status(is_set),
        )
        if not is_set:
            return format_html("{}{}", field, status)
        box_id = f"{final.get('id', name)}_remove"
        remove = format_html(
            '<div><label for="{}"><input type="checkbox" name="{}" id="{}"> Remove the stored value</label></div>',
            box_id,
            remove_name(name),
            box_id,
        )
        return format_html("{}{}{}", field, status, remove)

    def value_from_datadict(self, data: Any, files: Any, name: str) -> SecretEntry:
        typed = data.get(name)
        remove = data.get(remove_name(name))
        return SecretEntry(
            typed=typed if isinstance(typed, str) else "",
            remove=str(remove).lower() in {"on", "true", "1", "yes"},
        )

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data and remove_name(name) not in data


class SecretFormField(forms.Field):
    widget = SecretWidget

    def __init__(self, *, multiline: bool = False, max_length: int | None = None, **kwargs: Any) -> None:
        kwargs.pop("widget", None)  # a secret's input is always write-only
        kwargs["required"] = False  # blank keeps; the model says when a value is needed
        self.max_length = max_length
        super().__init__(widget=SecretWidget(multiline=multiline), **kwargs)

    def bound_data(self, data: Any, initial: Any) -> Any:
        # A form shown again after an error says whether a value is stored; what was
        # typed is not echoed back.
        return initial

    def to_python(self, value: Any) -> Any:
        if not isinstance(value, SecretEntry):
            value = SecretEntry(typed=value if isinstance(value, str) else "", remove=False)
        if value.remove:
            return ""
        typed = value.typed.strip()
        if not typed:
            return KEEP_SECRET
        if "\x00" in typed:
            raise ValidationError("Null characters are not allowed.", code="null_characters_not_allowed")
        if self.max_length is not None and len(typed) > self.max_length:
            raise ValidationError(f"At most {self.max_length} characters.", code="max_length")
        return typed

    def validate(self, value: Any) -> None:
        pass  # never required (see __init__)

    def run_validators(self, value: Any) -> None:
        if value is KEEP_SECRET or value == "":
            return
        super().run_validators(value)

    def has_changed(self, initial: Any, data: Any) -> bool:
        if not isinstance(data, SecretEntry):
            return False
        return bool(data.remove and initial) or bool(data.typed.strip())
