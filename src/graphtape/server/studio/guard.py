"""The Studio server's request guard: what every request must satisfy before any route runs.

``graphtape dev`` runs next to a browser that visits arbitrary sites, and the
routes execute tools and effects and serve every recorded prompt. So the
guard, an ASGI middleware outside everything else in the app, refuses:

* a ``Host`` that is not this server's (403): a page that rebinds its own
  name to 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the
  server. Allowed: loopback addresses and ``localhost``, the name the server
  was bound to, on a bind to every interface (``0.0.0.0``, ``::``) also any
  IP address (a rebinding attack needs a name its author controls; Vite's
  ``server.allowedHosts`` allows every IP address for the same reason) and the
  machine's own names, and the names configured (:func:`allowed_hosts_setting`);
* a missing or wrong token, when the server has one (401; an HTML page saying
  how to get in for a page request). ``GET ...?token=T`` sets the token as
  an ``HttpOnly``, ``SameSite=Strict`` cookie and redirects to the same
  address without it, so the UI, its assets and its streams authenticate by
  the cookie and the token is not left in the address bar;
* a state-changing request (POST, PUT, PATCH, DELETE) from a page of another
  site (403): its ``Origin`` must be the server's own, a loopback one (a local
  front end) or a configured one, and a request a browser marks
  ``Sec-Fetch-Site: cross-site`` needs such an ``Origin``;
* a state-changing request whose body is not of a type its route documents
  (415): JSON for the API, a tape file's types for the import. So no "simple"
  request (``text/plain``, a form, multipart, no type at all), which a page
  can send without a CORS preflight, reaches a route;
* a body larger than the limit (413).

A refusal answered to a front end CORS allows (a loopback origin, a configured
one) carries CORS headers as the app's answers do, so the page can read the
JSON message (a missing token, a body type) instead of a bare CORS error; a
page of another origin gets none and reads nothing.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from starlette.requests import cookie_parser
from starlette.responses import HTMLResponse, Response

from graphtape.server.studio.problems import error_json

__all__ = [
    "ALLOWED_HOSTS_ENV",
    "LOOPBACK_ORIGIN_REGEX",
    "BodyTypes",
    "Guard",
    "HostRule",
    "allowed_hosts_setting",
    "token_cookie_name",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: the environment setting naming more hosts to serve (comma-separated; ``*``: any), for reverse proxies
ALLOWED_HOSTS_ENV = "GRAPHTAPE_ALLOWED_HOSTS"

#: the origins of a front end on this machine, any port (answered by CORS and allowed to write by default)
LOOPBACK_ORIGIN_REGEX = r"https?://(localhost|127(\.\d{1,3}){3}|\[::1\])(:\d{1,5})?"

#: the methods that change something; the others only read
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: binds that listen on every interface
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "*"})

_NAME = re.compile(r"^\.?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")


def allowed_hosts_setting(options: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    """The hosts to serve beyond the defaults: each ``--allowed-host`` and the comma-separated
    :data:`ALLOWED_HOSTS_ENV`."""
    names = [o.strip() for o in options if o.strip()]
    names += [n.strip() for n in environ.get(ALLOWED_HOSTS_ENV, "").split(",") if n.strip()]
    return names


def host_name(value: str) -> str | None:
    """The name or address of a ``Host`` header or bind address: no port, no brackets, lower case,
    no final dot; None when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else None
        if rest is None or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        name = value[1:end]
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
        return name
    if value.count(":") > 1:  # a bare IPv6 address (a bind address, never a Host header)
        try:
            return str(ipaddress.IPv6Address(value))
        except ValueError:
            return None
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    name = name[:-1] if name.endswith(".") and len(name) > 1 else name
    return name if _NAME.match(name) else None


class HostRule:
    """Which ``Host`` headers the server answers (see the module docstring)."""

    def __init__(self, bind_host: str, allowed: Sequence[str] = ()):
        self.any = "*" in allowed
        self.names = {"localhost"}
        self.suffixes: list[str] = []
        #: a bind to every interface answers at any of the machine's addresses: any IP address
        self.any_address = bind_host.strip() in _WILDCARD_BINDS
        if self.any_address:
            for own in (socket.gethostname(), socket.getfqdn()):
                name = host_name(own)
                if name:
                    self.names.add(name)
        else:
            name = host_name(bind_host)
            if name:
                self.names.add(name)
        for entry in allowed:
            name = host_name(entry) if entry != "*" else None
            if name and name.startswith("."):
                self.suffixes.append(name)  # ".example.com": the name and every name under it
            elif name:
                self.names.add(name)

    def allows(self, host: str | None) -> bool:
        if self.any:
            return True
        if host is None:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host in self.names or any(host == s[1:] or host.endswith(s) for s in self.suffixes)
        return address.is_loopback or self.any_address or str(address) in self.names


def token_cookie_name(scope: Scope) -> str:
    """The cookie the token is kept in: named for the server's port, since a browser sends a host's
    cookies to every port of it (two servers on one machine keep their own)."""
    server = scope.get("server")
    return f"graphtape-token-{server[1]}" if server and server[1] else "graphtape-token"


def replayed(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app ``body`` (already read whole by a middleware) first, then
    whatever ``receive`` brings (a client's disconnect)."""
    handed = False

    async def replay() -> Message:
        nonlocal handed
        if not handed:
            handed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class Guard:
    """ASGI middleware: the Host, token, cross-site, content type and body size checks (module docstring).

    ``openapi``: the app's OpenAPI document, which says what body types each route takes (see
    :class:`BodyTypes`); ``cors_origins``: the origins configured beside the loopback ones;
    ``routed``: whether a route of the app serves a request (its method and path), so that a
    request none serves gets the router's 404 or 405 rather than a 415 about its body."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        openapi: Callable[[], dict[str, Any]],
        max_body_bytes: int,
        token: str | None,
        hosts: HostRule,
        cors_origins: Sequence[str] = (),
        routed: Callable[[Scope], bool] | None = None,
    ):
        self.app = app
        self.routed = routed
        self.body_types = BodyTypes(openapi)
        self.max_body_bytes = max_body_bytes
        self.token = token
        self.hosts = hosts
        self.any_origin = "*" in cors_origins
        self.origins = {o.strip().rstrip("/").lower() for o in cors_origins}
        self._loopback_origin = re.compile(LOOPBACK_ORIGIN_REGEX)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        refused = self._host_refused(headers)
        if refused is None and self.token is not None:
            refused = self._token_refused(scope, headers)
        if refused is None and scope.get("method") in STATE_CHANGING:
            refused = self._origin_refused(headers) or self._type_refused(scope, headers)
        if refused is not None:
            await refused(scope, receive, self._readable(headers, send))
            return
        length = headers.get("content-length")
        if length is not None:
            # the HTTP server holds the client to the length it declared
            if not length.isdigit():
                refusal = error_json(400, "Content-Length must be a number of bytes")
                await refusal(scope, receive, self._readable(headers, send))
                return
            if int(length) > self.max_body_bytes:
                await error_json(413, self._too_large())(scope, receive, self._readable(headers, send))
                return
            await self.app(scope, receive, send)
            return
        # no declared length (chunked): read the body here, up to the limit, then hand it on whole
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_body_bytes:
                await error_json(413, self._too_large())(scope, receive, self._readable(headers, send))
                return
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        await self.app(scope, replayed(b"".join(chunks), receive), send)

    def _readable(self, headers: dict[str, str], send: Send) -> Send:
        """``send`` for a refusal: with the CORS headers the app would give the request's origin,
        when CORS allows that origin (the loopback ones and those configured), so that its page
        reads the message; unchanged for any other origin."""
        origin = headers.get("origin")
        if origin is None or not self._cors_allowed(origin):
            return send
        extra = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return with_cors

    def _cors_allowed(self, origin: str) -> bool:
        value = origin.strip().rstrip("/").lower()
        return self.any_origin or value in self.origins or bool(self._loopback_origin.fullmatch(value))

    def _too_large(self) -> str:
        return f"request body larger than {self.max_body_bytes} bytes; send less (or raise the server's body limit)"

    # -- Host --------------------------------------------------------------------------------

    def _host_refused(self, headers: dict[str, str]) -> Response | None:
        raw = headers.get("host")
        if raw is None:
            return None  # HTTP/1.0 without a Host: no browser sends that, so no rebinding either
        name = host_name(raw)
        if self.hosts.allows(name):
            return None
        shown = name or raw
        return error_json(
            403,
            f"this server does not answer for host {raw!r} (a page of another site reaching it by DNS rebinding "
            f"looks like this); to serve that name (a reverse proxy's), start it with --allowed-host {shown} "
            f"or set {ALLOWED_HOSTS_ENV}={shown}",
        )

    # -- token -------------------------------------------------------------------------------

    def _token_refused(self, scope: Scope, headers: dict[str, str]) -> Response | None:
        if scope.get("method") == "OPTIONS" or scope.get("path") == "/ok":
            return None  # CORS preflights carry no credentials; /ok is the health check
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == "token"]
        if given and scope.get("method") in ("GET", "HEAD"):
            if self._matches(given[-1]):
                return self._keep_token(scope, headers, [(k, v) for k, v in query if k != "token"])
            return self._unauthorized(scope, headers, "the token in the address is not this server's")
        if self._authorized(scope, headers):
            return None
        return self._unauthorized(scope, headers, "missing or wrong token")

    def _matches(self, given: str) -> bool:
        assert self.token is not None
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def _authorized(self, scope: Scope, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and self._matches(auth[7:].strip()):
            return True
        if self._matches(headers.get("x-api-key", "")):
            return True
        cookie = cookie_parser(headers.get("cookie", "")).get(token_cookie_name(scope))
        return cookie is not None and self._matches(unquote(cookie))

    def _keep_token(self, scope: Scope, headers: dict[str, str], rest: list[tuple[str, str]]) -> Response:
        """The token in the address is right: keep it in the cookie and go to the address without it."""
        assert self.token is not None
        raw_path = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else quote(scope.get("path", "/"))
        location = path + ("?" + urlencode(rest) if rest else "")
        cookie = f"{token_cookie_name(scope)}={quote(self.token, safe='')}; HttpOnly; SameSite=Strict; Path=/"
        if scope.get("scheme") == "https":
            cookie += "; Secure"
        return Response(
            status_code=303,
            headers={"Location": location, "Set-Cookie": cookie, "Cache-Control": "no-store"},
        )

    def _unauthorized(self, scope: Scope, headers: dict[str, str], why: str) -> Response:
        if "text/html" in headers.get("accept", ""):
            return HTMLResponse(
                _TOKEN_PAGE.format(why=html.escape(why), address=html.escape(self._address(scope, headers))),
                status_code=401,
                headers={"WWW-Authenticate": "Bearer", "Cache-Control": "no-store"},
            )
        return error_json(
            401,
            f"{why}; send 'Authorization: Bearer <token>' (or x-api-key), or open "
            f"{self._address(scope, headers)} in a browser",
            {"WWW-Authenticate": "Bearer"},
        )

    @staticmethod
    def _address(scope: Scope, headers: dict[str, str]) -> str:
        host = headers.get("host") or "host:port"
        return f"{scope.get('scheme', 'http')}://{host}{scope.get('path', '/')}?token=<token>"

    # -- cross-site writes -------------------------------------------------------------------

    def _origin_refused(self, headers: dict[str, str]) -> Response | None:
        origin = headers.get("origin")
        if origin is not None:
            if self._origin_allowed(origin, headers.get("host")):
                return None
            return error_json(
                403,
                f"a {origin!r} page may not change anything here (cross-site request refused); "
                f"to allow a front end at that origin, start the server with --cors-origin {origin}",
            )
        if headers.get("sec-fetch-site", "").lower() == "cross-site":
            return error_json(
                403,
                "a page of another site may not change anything here (Sec-Fetch-Site: cross-site, no Origin); "
                "send the request from this server's pages or a configured --cors-origin",
            )
        return None

    def _origin_allowed(self, origin: str, host: str | None) -> bool:
        if self._cors_allowed(origin):
            return True
        value = origin.strip().rstrip("/").lower()
        parts = urlsplit(value)
        # the server's own pages: the origin's host and port are the ones the request was sent to
        return parts.scheme in ("http", "https") and host is not None and parts.netloc == host.strip().lower()

    # -- body types --------------------------------------------------------------------------

    def _type_refused(self, scope: Scope, headers: dict[str, str]) -> Response | None:
        if self.routed is not None and not self.routed(scope):
            return None  # no route serves it: the router answers 404 or 405 before anything reads the body
        method, path = str(scope.get("method")), str(scope.get("path", ""))
        takes = self.body_types.of(method, path)
        given = headers.get("content-type", "").partition(";")[0].strip().lower()
        has_body = headers.get("content-length", "0") not in ("0", "") or "transfer-encoding" in headers
        where = f"{method} {path}"
        if not takes:
            if (given and given != "application/json") or (not given and has_body):
                return error_json(415, f"{where} takes no body; send none")
            return None
        if given in takes or (not given and not has_body):
            return None
        wanted = " or ".join(sorted(takes))
        what = f"not {given}" if given else "no Content-Type was given"
        return error_json(415, f"{where} takes a body of type {wanted} ({what}); send it with Content-Type: {wanted}")


class BodyTypes:
    """The body types each operation of the app documents, read from its OpenAPI document (the
    contract clients are given): a ``requestBody``'s content types, none for an operation without
    one. A state-changing request to a path the document does not list may send JSON only."""

    def __init__(self, openapi: Callable[[], dict[str, Any]]):
        self._openapi = openapi
        self._operations: list[tuple[re.Pattern[str], int, dict[str, frozenset[str]]]] | None = None

    def of(self, method: str, path: str) -> frozenset[str]:
        best: tuple[int, frozenset[str]] | None = None
        for pattern, literal, methods in self._load():
            if method in methods and pattern.fullmatch(path) and (best is None or literal > best[0]):
                best = (literal, methods[method])  # /threads/search rather than /threads/{thread_id}
        return best[1] if best is not None else frozenset({"application/json"})

    def _load(self) -> list[tuple[re.Pattern[str], int, dict[str, frozenset[str]]]]:
        if self._operations is None:
            operations = []
            for template, ops in (self._openapi().get("paths") or {}).items():
                parts = re.split(r"(\{[^}]+\})", template)
                regex = "".join(
                    (".*" if p.endswith(":path}") else "[^/]+") if p.startswith("{") else re.escape(p) for p in parts
                )
                literal = sum(len(p) for p in parts if not p.startswith("{"))
                methods = {
                    m.upper(): frozenset(t.lower() for t in ((op.get("requestBody") or {}).get("content") or {}))
                    for m, op in ops.items()
                    if isinstance(op, dict)
                }
                operations.append((re.compile(regex), literal, methods))
            self._operations = operations
        return self._operations


_TOKEN_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>graphtape Studio: token needed</title></head>
<body style="font:15px system-ui,sans-serif;margin:2em;max-width:50em">
<h1>This graphtape server needs its token</h1>
<p>{why}. Open the address <code>graphtape dev</code> (or <code>graphtape serve</code>) printed when it
started, <code>{address}</code>, with the server's token: the value of <code>GRAPHTAPE_TOKEN</code>
when it is set, else the one printed. The browser then keeps the token in a cookie for this server.</p>
</body></html>
"""
