from django.apps import AppConfig


class SignInConfig(AppConfig):
    name = "claw_platform.signin"
    label = "signin"
    verbose_name = "Sign-in lock-outs"
