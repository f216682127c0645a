"""The REST API's JSON parser: orjson, strict.

The standard library's parser accepts what no database stores and what later code cannot walk: a lone
UTF-16 surrogate spelled as an escape (``"\\ud800"``), which failed deep inside the write with a 500, and
nesting a thousand levels deep, which raised RecursionError (a 500 again). orjson refuses both (it checks
that strings are valid Unicode and stops at 1,024 levels), as it refuses NaN and Infinity, which are not
JSON; every refusal is a ParseError, answered as 400 ``invalid_json`` naming the body. It is also several
times faster on the large bodies of bulk writes and conversation imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

import orjson
from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        context = parser_context or {}
        encoding = context.get("encoding", settings.DEFAULT_CHARSET)
        raw = stream.read()
        try:
            if encoding.lower().replace("-", "") != "utf8":
                raw = raw.decode(encoding).encode("utf-8", "surrogatepass")
            return orjson.loads(raw)
        except (orjson.JSONDecodeError, UnicodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
