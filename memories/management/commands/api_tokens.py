from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from memories import tokens


class Command(BaseCommand):
    help = "List USERNAME's API tokens (by the first 8 characters of each), or revoke some."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--revoke", metavar="PREFIX", help="revoke the tokens whose key starts with PREFIX")
        group.add_argument("--revoke-all", action="store_true", help="revoke every token of the user")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(username=options["username"])
        except User.DoesNotExist:
            raise CommandError(f"no user named {options['username']!r}") from None
        if options["revoke"] is not None or options["revoke_all"]:
            prefix = "" if options["revoke_all"] else str(options["revoke"]).strip()
            if not options["revoke_all"] and len(prefix) < 4:
                raise CommandError("--revoke: give at least the first 4 characters of the token")
            count = tokens.api_tokens_revoke(user=user, prefix=prefix)
            self.stdout.write(f"Revoked {count} token{'s' if count != 1 else ''} of {user.get_username()}.")
            return
        now = timezone.now()
        rows = tokens.api_tokens_of(user=user)
        if not rows:
            self.stdout.write(f"{user.get_username()} has no API tokens.")
        for token in rows:
            if token.revoked_at is not None:
                state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}"
            elif token.expires_at is not None and token.expires_at <= now:
                state = f"expired {token.expires_at:%Y-%m-%d %H:%M}"
            elif token.expires_at is not None:
                state = f"active until {token.expires_at:%Y-%m-%d %H:%M}"
            else:
                state = "active"
            self.stdout.write(f"{token.prefix}…  {token.created_at:%Y-%m-%d %H:%M}  {state:<28}  {token.name}")
