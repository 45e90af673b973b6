from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from channels_app.web import accounts, attachments, chats, memories, views
from channels_app.web.security import chat_headers
from claw_platform.signin.pages import ChatAuthenticationForm, throttled_sign_in

app_name = "chat"

urlpatterns = [
    path("", views.chat_home, name="home"),
    path("s/<uuid:session_id>/", views.chat_session, name="session"),
    path("s/<uuid:session_id>/transcript.json", views.chat_transcript, name="transcript"),
    path("s/<uuid:session_id>/rename/", chats.rename_chat, name="rename"),
    path("s/<uuid:session_id>/delete/", chats.delete_chat, name="delete"),
    path("s/<uuid:session_id>/restore/", chats.restore_chat, name="restore"),
    path(
        "s/<uuid:session_id>/export.md", chats.export_chat_file, {"fmt": "markdown"}, name="export_markdown"
    ),
    path("s/<uuid:session_id>/export.json", chats.export_chat_file, {"fmt": "json"}, name="export_json"),
    path("s/<uuid:session_id>/usage.json", chats.chat_usage, name="usage"),
    path("s/<uuid:session_id>/attachments/", attachments.upload_attachment, name="upload_attachment"),
    path(
        "s/<uuid:session_id>/attachments/<int:attachment_id>/",
        attachments.attachment_image,
        name="attachment_image",
    ),
    path("search.json", chats.search_chats, name="search"),
    path("new/", views.new_session, name="new"),
    path("team/", views.switch_tenant, name="switch_tenant"),
    path("memories/", memories.memories_page, name="memories"),
    path("memories/<int:pk>/forget/", memories.forget_memory, name="forget_memory"),
    path("memories/forget-everything/", memories.forget_everything, name="forget_everything"),
    path("accounts/", accounts.accounts_page, name="accounts"),
    path("accounts/link-code/", accounts.new_link_code, name="new_link_code"),
    path("accounts/links/<int:pk>/remove/", accounts.unlink_chat_account, name="unlink_chat_account"),
    path("accounts/<str:kind>/<int:pk>/", accounts.connect_account, name="connect_account"),
    path("accounts/<str:kind>/<int:pk>/remove/", accounts.disconnect_account, name="disconnect_account"),
    path(
        "login/",
        chat_headers(
            throttled_sign_in(
                auth_views.LoginView.as_view(
                    template_name="chat/login.html",
                    authentication_form=ChatAuthenticationForm,
                    redirect_authenticated_user=True,
                )
            )
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="chat:login"), name="logout"),
]
