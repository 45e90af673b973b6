from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from channels_app.web import accounts, views
from channels_app.web.security import chat_headers
from claw_platform.signin.pages import ChatAuthenticationForm, throttled_sign_in

app_name = "chat"

urlpatterns = [
    path("", views.chat_home, name="home"),
    path("s/<uuid:session_id>/", views.chat_session, name="session"),
    path("s/<uuid:session_id>/transcript.json", views.chat_transcript, name="transcript"),
    path("new/", views.new_session, name="new"),
    path("team/", views.switch_tenant, name="switch_tenant"),
    path("accounts/", accounts.accounts_page, name="accounts"),
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
