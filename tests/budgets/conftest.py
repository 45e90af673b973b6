from tests.api.conftest import _in_process_channel_layer, inline_runs

__all__ = ["_in_process_channel_layer", "inline_runs"]
