from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print USERNAME's API token (created on first use). The token is the last word of the output."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="replace an existing token with a new one")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(username=options["username"])
        except User.DoesNotExist:
            raise CommandError(f"no user named {options['username']!r}; create it with createsuperuser") from None
        if options["rotate"]:
            Token.objects.filter(user=user).delete()
        token, created = Token.objects.get_or_create(user=user)
        state = "created" if created else "existing"
        self.stdout.write(f"API token for {user.get_username()} ({state}): {token.key}")
