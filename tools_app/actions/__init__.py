"""State changes of the tools app, each with its audit row: approvals' "always" grants
(``approvals``) and the tenant's extensions (``extensions``)."""

from tools_app.actions.approvals import do_record_always_approval, do_revoke_always_approval

__all__ = ["do_record_always_approval", "do_revoke_always_approval"]
