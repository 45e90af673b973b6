from django.apps import AppConfig


class ChannelsAppConfig(AppConfig):
    name = "channels_app"
    verbose_name = "Channels and live streaming"

    def ready(self) -> None:
        # Every process that executes runs relays their events to the channel layer,
        # where the session's sockets pick them up (DESIGN "Live events").
        from agents.runtime.events import set_relay
        from channels_app.relay import ChannelLayerRelay

        set_relay(ChannelLayerRelay())
