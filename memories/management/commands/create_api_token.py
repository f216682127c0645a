from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from memories import tokens


class Command(BaseCommand):
    help = (
        "Issue USERNAME a new API token and print it; the token is the last word of the output. It is stored "
        "hashed, so this is the only time it is shown; earlier tokens keep working unless --rotate."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="revoke the user's other tokens")
        parser.add_argument("--name", default="create_api_token", help="a label to tell the token apart by")
        parser.add_argument("--expires-days", type=int, default=None, help="the token stops working after N days")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(username=options["username"])
        except User.DoesNotExist:
            raise CommandError(f"no user named {options['username']!r}; create it with createsuperuser") from None
        days = options["expires_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-days: expected a whole number of days >= 1")
        expires_at = None if days is None else timezone.now() + timedelta(days=days)
        issued = tokens.api_token_create(user=user, name=options["name"], expires_at=expires_at)
        notes = ["created, shown once"]
        if expires_at is not None:
            notes.append(f"expires {expires_at:%Y-%m-%d %H:%M} UTC")
        if options["rotate"]:
            revoked = tokens.api_tokens_revoke(user=user, except_id=issued.token.pk)
            notes.append(f"{revoked} earlier revoked")
        self.stdout.write(f"API token for {user.get_username()} ({'; '.join(notes)}): {issued.key}")
