"""Chat-platform channels (CH1-CH4): a channel per platform bot, the platform
accounts linked to members, and every inbound update as received."""

from channels_app.models.channel import Channel, ChannelKind, ChannelLink, ReceiveMode
from channels_app.models.conversation import ChannelConversation
from channels_app.models.inbound import InboundStatus, InboundUpdate
from channels_app.models.link_code import ChannelLinkCode
from channels_app.models.outbound import OutboundReply, OutboundStatus

__all__ = [
    "Channel",
    "ChannelConversation",
    "ChannelKind",
    "ChannelLink",
    "ChannelLinkCode",
    "InboundStatus",
    "InboundUpdate",
    "OutboundReply",
    "OutboundStatus",
    "ReceiveMode",
]
