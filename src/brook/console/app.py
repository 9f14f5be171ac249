"""The console's web application (Starlette): pages rendered on the server with Jinja2, htmx
for the parts that refresh themselves, uPlot for the lag chart; every asset served from the
package (static/), nothing from another site.

Safety, in the order a request meets it: the security headers on every answer; the login
(HTTP basic authentication) when a users file is given; for a change (every change is a
POST, and only changes are), read-only mode refuses it (403) before anything else looks at
it, then the Origin and the CSRF token (safety.py) must be right.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .. import __version__
from ..cli.errors import CliError
from . import render, safety
from .backend import OFFSETS_TOPIC, Backend
from .lag import duration_text
from .reader import ISOLATION_LEVELS

log = logging.getLogger("brook.console")
HERE = Path(__file__).parent
CHANGE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class ConsoleSettings:
    read_only: bool = False
    users: safety.Users = field(default_factory=safety.Users)
    lag_interval: float = 5.0  # seconds between lag samples (and chart updates)
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)


# --- middleware (plain ASGI) ------------------------------------------------------------------

SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
     b"script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class Guard:
    """Security headers, the CSRF cookie, the login, and read-only mode's refusal."""

    def __init__(self, app, settings: ConsoleSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a bad cookie header is as none
            cookie = SimpleCookie()
        nonce = cookie[safety.CSRF_COOKIE].value if safety.CSRF_COOKIE in cookie else None
        new_cookie = nonce is None
        if new_cookie:
            nonce = safety.new_nonce()
        scope.setdefault("state", {})["csrf_nonce"] = nonce

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if new_cookie:
                    extra.append((b"set-cookie", (
                        f"{safety.CSRF_COOKIE}={nonce}; Path=/; HttpOnly; SameSite=Strict"
                    ).encode()))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        users = self.settings.users
        if users and users.check(headers.get("authorization")) is None:
            await _plain(send_with_headers, 401, "Log in to see the brook console.",
                         [(b"www-authenticate", b'Basic realm="brook console", charset="UTF-8"')])
            return
        if scope["method"] in CHANGE_METHODS and self.settings.read_only:
            await _plain(send_with_headers, 403,
                         "This console is read-only: it changes nothing (started with "
                         "--read-only).")
            return
        await self.app(scope, receive, send_with_headers)


async def _plain(send, status: int, text: str, headers: list | None = None) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


# --- the application ------------------------------------------------------------------------


def create_app(backend: Backend, settings: ConsoleSettings, sampler=None) -> Starlette:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.globals.update(version=__version__, read_only=settings.read_only,
                       lag_interval=settings.lag_interval, offsets_topic=OFFSETS_TOPIC,
                       connection=backend.connection_text())
    env.filters["size"] = render.size_text
    env.filters["ids"] = lambda xs: ",".join(str(x) for x in xs) if xs else "-"
    env.filters["dash"] = lambda v: "-" if v is None else v
    env.filters["path"] = lambda v: quote(str(v), safe="")
    env.filters["rate"] = render.rate_text

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        nonce = request.scope.get("state", {}).get("csrf_nonce", "")
        context.update(request=request, csrf_token=safety.csrf_token(settings.secret, nonce),
                       nav=context.get("nav", ""))
        return templates.TemplateResponse(request, name, context, status_code=status)

    def problem(request: Request, message: str, status: int = 400) -> Response:
        return page(request, "error.html", status=status, message=message, nav="")

    def handled(fn: Callable) -> Callable:
        """A page whose CliError (and any other failure) becomes a page with its message."""
        @functools.wraps(fn)
        async def wrapper(request: Request) -> Response:
            try:
                return await fn(request)
            except CliError as exc:
                return problem(request, exc.message, _status(exc))
            except ValueError as exc:  # bad input parsed by the page
                return problem(request, str(exc), 400)
            except HTTPException:
                raise
            except Exception as exc:  # noqa: BLE001 - a message, never a stack trace
                log.exception("console: %s %s failed", request.method, request.url.path)
                return problem(request, f"unexpected error: {type(exc).__name__}: {exc}", 500)
        return wrapper

    async def change_form(request: Request) -> FormData:
        """The form of a change, after the checks only a change needs (Origin and token)."""
        form = await request.form()
        if not safety.same_origin(request.headers.get("origin"), request.headers.get("host")):
            raise HTTPException(403, "The request came from another site.")
        nonce = request.scope.get("state", {}).get("csrf_nonce")
        if not safety.csrf_valid(settings.secret, nonce, form.get(safety.CSRF_FIELD)):
            raise HTTPException(403, "The form's security token is missing or stale: reload "
                                     "the page and try again.")
        return form

    def call(fn, *args, **kwargs):
        return run_in_threadpool(fn, *args, **kwargs)

    # -- groups --------------------------------------------------------------------------

    @handled
    async def groups(request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        at, rows = await call(backend.groups_overview)
        if q:
            rows = [r for r in rows if q.lower() in r["group"].lower()]
        name = "groups_rows.html" if request.headers.get("hx-request") else "groups.html"
        return page(request, name, nav="groups", rows=rows, q=q,
                    at=time.strftime("%H:%M:%S", time.localtime(at)))

    @handled
    async def group(request: Request) -> Response:
        group_id = request.path_params["group"]
        view = await call(backend.group, group_id)
        name = "group_live.html" if request.headers.get("hx-request") else "group.html"
        return page(request, name, nav="groups", g=view, group_id=group_id)

    async def lag(request: Request) -> Response:
        return JSONResponse(backend.history.chart(request.path_params["group"]) | {
            "interval": settings.lag_interval})

    def reset_args(params) -> tuple[Any, list[str], bool, dict[str, str]]:
        from ..cli.reset import ResetSpec, reset_spec

        kind = params.get("to", "earliest")
        value = (params.get("value") or "").strip()
        scope = params.get("scope", "all")
        topics = [t.strip() for t in (params.get("topics") or "").split() if t.strip()]
        raw = {"to": kind, "value": value, "scope": scope, "topics": " ".join(topics)}
        if scope != "all" and not topics:
            raise ValueError("name the partitions: one or more TOPIC or TOPIC:P,P (or choose "
                             "every partition the group has an offset for)")

        def number(what: str) -> int:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"{what} must be a whole number, not {value!r}") from None

        if kind == "earliest":
            spec = reset_spec(to_earliest=True)
        elif kind == "latest":
            spec = reset_spec(to_latest=True)
        elif kind == "offset":
            n = number("the offset")
            if n < 0:
                raise ValueError(f"an offset is 0 or more, not {n}")
            spec = reset_spec(to_offset=n)
        elif kind == "shift":
            spec = reset_spec(shift_by=number("the shift"))
        elif kind == "timestamp":  # the page's datetime field, parsed here (UTC)
            spec = ResetSpec("timestamp", render.parse_time(value))
        else:
            raise ValueError(f"unknown reset {kind!r}: earliest, latest, offset, shift or "
                             "timestamp")
        return spec, topics, scope == "all", raw

    @handled
    async def reset(request: Request) -> Response:
        """GET: the dry run of a reset; POST: its execution (planned again: the logs may have
        moved since the dry run)."""
        group_id = request.path_params["group"]
        execute = request.method == "POST"
        params = await change_form(request) if execute else request.query_params
        spec, topics, all_topics, raw = reset_args(params)
        run = backend.reset_execute if execute else backend.reset_plan
        changes, warnings = await call(run, group_id, spec, topics, all_topics)
        if execute:
            log.info("console: reset the offsets of group %r (%s)", group_id, raw["to"])
        return page(request, "reset.html", nav="groups", group_id=group_id, changes=changes,
                    warnings=warnings, raw=raw, executed=execute)

    @handled
    async def delete_group(request: Request) -> Response:
        group_id = request.path_params["group"]
        form = await change_form(request)
        if form.get("confirm") != group_id:
            raise ValueError("type the group's name to confirm its deletion")
        await call(backend.delete_group, group_id)
        log.info("console: deleted group %r", group_id)
        return page(request, "done.html", nav="groups",
                    message=f"Deleted consumer group '{group_id}'.", back="/groups",
                    back_text="Consumer groups")

    @handled
    async def delete_offsets(request: Request) -> Response:
        group_id = request.path_params["group"]
        form = await change_form(request)
        topics = [t.strip() for t in (form.get("topics") or "").split() if t.strip()]
        if not topics:
            raise ValueError("name the topics (TOPIC or TOPIC:P,P) whose offsets to delete")
        rows = await call(backend.delete_offsets, group_id, topics)
        log.info("console: deleted offsets of group %r", group_id)
        return page(request, "done.html", nav="groups",
                    message=f"Deleted {len(rows)} committed offset(s) of group '{group_id}'.",
                    back=f"/groups/{quote(group_id, safe='')}", back_text=group_id)

    # -- the offsets topic ---------------------------------------------------------------

    @handled
    async def offsets_topic(request: Request) -> Response:
        group_id = request.query_params.get("group", "").strip()
        located = await call(backend.locate_group, group_id) if group_id else None
        view = await call(backend.offsets_topic)
        return page(request, "offsets_topic.html", nav="offsets", view=view, located=located,
                    group_id=group_id)

    @handled
    async def offsets_partition(request: Request) -> Response:
        partition = request.path_params["partition"]
        params = request.query_params
        offset = _int_param(params, "offset", minimum=0)
        limit = _int_param(params, "limit", minimum=1) or 100
        newest_first = params.get("order", "newest") != "oldest"
        group_filter = params.get("group", "").strip()
        pg, rows = await call(backend.offsets_records, partition, offset, limit, newest_first,
                              group_filter)
        return page(request, "offsets_partition.html", nav="offsets", partition=partition,
                    pg=pg, rows=rows, limit=limit, newest_first=newest_first,
                    group_filter=group_filter, offset=offset)

    # -- cluster -------------------------------------------------------------------------

    @handled
    async def cluster(request: Request) -> Response:
        view = await call(backend.cluster_page)
        rates = await call(backend.broker_rates)
        return page(request, "cluster.html", nav="cluster", view=view, rates=rates)

    @handled
    async def cluster_rates(request: Request) -> Response:
        rates = await call(backend.broker_rates)
        return page(request, "cluster_rates.html", nav="cluster", rates=rates)

    @handled
    async def broker(request: Request) -> Response:
        broker_id = request.path_params["broker"]
        changed = request.query_params.get("changed") == "1"
        configs = await call(backend.broker_configs, broker_id)
        if changed:
            configs = [c for c in configs if c["source"] != "DEFAULT_CONFIG"]
        return page(request, "broker.html", nav="cluster", broker_id=broker_id,
                    configs=configs, changed=changed)

    # -- topics --------------------------------------------------------------------------

    @handled
    async def topics(request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        internal = request.query_params.get("internal") == "1"
        rows = await call(backend.topics)
        if q:
            rows = [r for r in rows if q.lower() in r["topic"].lower()]
        if not internal:
            rows = [r for r in rows if not r["internal"]]
        return page(request, "topics.html", nav="topics", rows=rows, q=q, internal=internal)

    def topic_param(request: Request) -> str:
        name = request.path_params["topic"]
        why = render.topic_name_problem(name)
        if why:
            raise ValueError(why)
        return name

    @handled
    async def topic(request: Request) -> Response:
        name = topic_param(request)
        view = await call(backend.topic, name)
        return page(request, "topic.html", nav="topics", t=view)

    @handled
    async def create_topic(request: Request) -> Response:
        form = await change_form(request)
        name = (form.get("name") or "").strip()
        why = render.topic_name_problem(name)
        if why:
            raise ValueError(why)
        partitions = _int_field(form, "partitions", -1, minimum=1)
        replication = _int_field(form, "replication_factor", -1, minimum=1)
        configs = _config_lines(form.get("configs") or "")
        await call(backend.create_topic, name, partitions, replication, configs)
        log.info("console: created topic %r", name)
        return RedirectResponse(f"/topics/{name}", status_code=303)

    @handled
    async def delete_topic(request: Request) -> Response:
        name = topic_param(request)
        form = await change_form(request)
        if form.get("confirm") != name:
            raise ValueError("type the topic's name to confirm its deletion")
        await call(backend.delete_topic, name)
        log.info("console: deleted topic %r", name)
        return page(request, "done.html", nav="topics", message=f"Deleted topic '{name}'.",
                    back="/topics", back_text="Topics")

    @handled
    async def add_partitions(request: Request) -> Response:
        name = topic_param(request)
        form = await change_form(request)
        total = _int_field(form, "partitions", None, minimum=1)
        if total is None:
            raise ValueError("give the topic's new number of partitions")
        await call(backend.add_partitions, name, total)
        log.info("console: topic %r grown to %d partitions", name, total)
        return RedirectResponse(f"/topics/{name}", status_code=303)

    @handled
    async def alter_configs(request: Request) -> Response:
        name = topic_param(request)
        form = await change_form(request)
        to_set = _config_lines(form.get("set") or "")
        to_delete = [k.strip() for k in (form.get("delete") or "").split() if k.strip()]
        await call(backend.alter_topic_configs, name, to_set, to_delete)
        log.info("console: altered the configs of topic %r", name)
        return RedirectResponse(f"/topics/{name}", status_code=303)

    # -- messages ------------------------------------------------------------------------

    @handled
    async def messages(request: Request) -> Response:
        name = topic_param(request)
        params = request.query_params
        partition = _int_param(params, "partition", minimum=0) or 0
        offset = _int_param(params, "offset", minimum=0)
        ts_text = params.get("time", "").strip()
        timestamp = render.parse_time(ts_text) if ts_text else None
        limit = _int_param(params, "limit", minimum=1) or 50
        fmt = params.get("format", "auto")
        if fmt not in render.FORMATS:
            raise ValueError(f"format is one of {', '.join(render.FORMATS)}")
        newest_first = params.get("order", "newest") != "oldest"
        key_filter = params.get("key", "")
        contains = params.get("contains", "")
        isolation = params.get("isolation", "read_uncommitted")
        if isolation not in ISOLATION_LEVELS:
            raise ValueError("isolation is read_uncommitted or read_committed")
        view = await call(backend.topic, name)
        pg, rows = await call(backend.messages, name, partition, offset=offset,
                              timestamp=timestamp, newest_first=newest_first, limit=limit,
                              fmt=fmt, key_filter=key_filter, contains=contains,
                              isolation=isolation)
        return page(request, "messages.html", nav="topics", t=view, partition=partition,
                    pg=pg, rows=rows, limit=limit, fmt=fmt, newest_first=newest_first,
                    isolation=isolation,
                    key_filter=key_filter, contains=contains, offset=offset, time_text=ts_text,
                    produced=params.get("produced"))

    @handled
    async def produce(request: Request) -> Response:
        from ..cli.console import parse_headers

        name = topic_param(request)
        form = await change_form(request)
        partition = _int_field(form, "partition", None, minimum=0)
        key = form.get("key") or ""
        value = form.get("value") or ""
        headers = parse_headers(form.get("headers") or "")
        p, offset = await call(backend.produce, name, partition, key.encode() if key else None,
                               value.encode(), headers)
        return RedirectResponse(f"/topics/{name}/messages?partition={p}&offset={offset}"
                                f"&produced={offset}", status_code=303)

    # -- security ------------------------------------------------------------------------

    def acl_filter_args(params) -> tuple[Any, dict[str, str]]:
        """The ACL filter of a form or a query (empty fields match anything): (confluent's
        AclBindingFilter or None when every field is empty, the fields as given)."""
        from ..cli.acls import acl_filter

        raw = {k: (params.get(k) or "").strip() for k in ACL_FIELDS}
        given = {k: v for k, v in raw.items() if v and v.upper() != "ANY"}
        return (acl_filter(**given) if given else None), raw

    @handled
    async def security(request: Request) -> Response:
        f, raw = acl_filter_args(request.query_params)
        view = await call(backend.security_page, f)
        return page(request, "security.html", nav="security", view=view, acl=raw,
                    filtered=f is not None, operations=ACL_OPERATIONS,
                    mechanisms=SCRAM_MECHANISMS, quota_keys=QUOTA_KEYS)

    def security_done(request: Request, message: str) -> Response:
        return page(request, "done.html", nav="security", message=message, back="/security",
                    back_text="Security")

    @handled
    async def create_acl(request: Request) -> Response:
        from ..cli.acls import acl_binding, binding_text

        form = await change_form(request)
        fields = {k: (form.get(k) or "").strip() for k in ACL_FIELDS}
        binding = acl_binding(fields["resource"], fields["name"], fields["principal"],
                              fields["operation"], fields["permission"] or "ALLOW",
                              fields["host"] or "*", fields["pattern"] or "LITERAL")
        await call(backend.create_acl, binding)
        log.info("console: added an ACL for %s on %s %r", binding.principal,
                 binding.restype.name, binding.name)
        return security_done(request, "Added the ACL: " + binding_text(binding))

    @handled
    async def delete_acls(request: Request) -> Response:
        form = await change_form(request)
        f, raw = acl_filter_args(form)
        if f is None:
            raise ValueError("narrow the filter: an empty one would delete every ACL of the "
                             "cluster (brook acls remove does that, one resource at a time)")
        removed = await call(backend.delete_acls, f)
        log.info("console: deleted %d ACL(s)", len(removed))
        return page(request, "done.html", nav="security", back="/security",
                    back_text="Security", message=f"Deleted {len(removed)} ACL(s).",
                    rows=removed)

    @handled
    async def set_user(request: Request) -> Response:
        form = await change_form(request)
        user = (form.get("user") or "").strip()
        mechanism = form.get("mechanism") or "SCRAM-SHA-512"
        iterations = _int_field(form, "iterations", 4096, minimum=4096)
        password = form.get("password") or ""
        if password != (form.get("confirm_password") or ""):
            raise ValueError("the two passwords differ: type the same one twice")
        await call(backend.set_scram, user, mechanism, password, iterations)
        del password
        log.info("console: set the %s credential of user %r", mechanism, user)
        return security_done(request, f"User {user}: {mechanism} credential set "
                                      f"({iterations} iterations).")

    @handled
    async def delete_user(request: Request) -> Response:
        form = await change_form(request)
        user = (form.get("user") or "").strip()
        mechanism = (form.get("mechanism") or "").strip() or None
        if not user:
            raise ValueError("name the user whose credentials to delete")
        deleted = await call(backend.delete_scram, user, mechanism)
        log.info("console: deleted the %s credential(s) of user %r", ", ".join(deleted), user)
        return security_done(request, f"User {user}: {', '.join(deleted)} deleted.")

    def quota_target(form) -> dict:
        target: dict = {}
        for key, field_name in (("user", "user"), ("client-id", "client")):
            if form.get(f"{field_name}_default"):
                target[key] = None
            else:
                name = (form.get(field_name) or "").strip()
                if name:
                    target[key] = None if name == DEFAULT_ENTITY else name
        if not target:
            raise ValueError("name a user, a client id, or both (or choose their defaults)")
        return target

    @handled
    async def set_quota(request: Request) -> Response:
        form = await change_form(request)
        target = quota_target(form)
        key = (form.get("quota") or "").strip()
        if key not in QUOTA_KEYS:
            raise ValueError(f"the quota is one of {', '.join(QUOTA_KEYS)}")
        text = (form.get("value") or "").strip()
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"the value of {key} must be a number, not {text!r}") from None
        if value <= 0:
            raise ValueError(f"the value of {key} must be more than 0 (delete the quota to "
                             "remove the limit)")
        what = await call(backend.alter_quotas, target, {key: value}, [])
        log.info("console: set %s of %s", key, what)
        return security_done(request, f"Set {key}={text} for {what}.")

    @handled
    async def delete_quota(request: Request) -> Response:
        form = await change_form(request)
        target = quota_target(form)
        key = (form.get("quota") or "").strip()
        if not key:
            raise ValueError("name the quota to remove")
        what = await call(backend.alter_quotas, target, {}, [key])
        log.info("console: removed %s of %s", key, what)
        return security_done(request, f"Removed {key} from {what}.")

    async def root(request: Request) -> Response:
        return RedirectResponse("/groups", status_code=302)

    async def not_found(request: Request, exc: HTTPException) -> Response:
        status = exc.status_code
        message = exc.detail if status != 404 else f"No page at {request.url.path}."
        return problem(request, message, status)

    routes = [
        Route("/", root),
        Route("/groups", groups),
        Route("/groups/{group:path}", group),
        Route("/lag/{group:path}", lag),
        Route("/reset/{group:path}", reset, methods=["GET", "POST"]),
        Route("/delete-group/{group:path}", delete_group, methods=["POST"]),
        Route("/delete-offsets/{group:path}", delete_offsets, methods=["POST"]),
        Route("/offsets-topic", offsets_topic),
        Route("/offsets-topic/{partition:int}", offsets_partition),
        Route("/cluster", cluster),
        Route("/cluster/rates", cluster_rates),
        Route("/cluster/brokers/{broker:int}", broker),
        Route("/security", security),
        Route("/security/acls", create_acl, methods=["POST"]),
        Route("/security/acls/delete", delete_acls, methods=["POST"]),
        Route("/security/users", set_user, methods=["POST"]),
        Route("/security/users/delete", delete_user, methods=["POST"]),
        Route("/security/quotas", set_quota, methods=["POST"]),
        Route("/security/quotas/delete", delete_quota, methods=["POST"]),
        Route("/topics", topics, methods=["GET"]),
        Route("/topics", create_topic, methods=["POST"]),
        Route("/topics/{topic}", topic),
        Route("/topics/{topic}/delete", delete_topic, methods=["POST"]),
        Route("/topics/{topic}/partitions", add_partitions, methods=["POST"]),
        Route("/topics/{topic}/configs", alter_configs, methods=["POST"]),
        Route("/topics/{topic}/messages", messages, methods=["GET"]),
        Route("/topics/{topic}/messages", produce, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if sampler is not None:
            sampler.start()
        try:
            yield
        finally:
            if sampler is not None:
                sampler.stop()
            await run_in_threadpool(backend.close)

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: not_found})
    app.add_middleware(Guard, settings=settings)
    app.state.backend = backend
    app.state.duration_text = duration_text
    return app


ACL_FIELDS = ("resource", "name", "pattern", "principal", "host", "operation", "permission")
ACL_OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                  "DescribeConfigs", "AlterConfigs", "IdempotentWrite")
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
DEFAULT_ENTITY = "<default>"  # how the quotas table names a default user or client id


def _status(exc: CliError) -> int:
    """The HTTP status of a refusal: 400 for bad input, 404 for what does not exist, 502 for
    what the brokers refused or did not answer."""
    if exc.code == 2:
        return 400
    text = exc.message
    if text.startswith("unknown topic") or text.endswith("does not exist"):
        return 404
    return 502


def _int_param(params, name: str, minimum: int | None = None) -> int | None:
    text = (params.get(name) or "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {minimum} or more, not {value}")
    return value


def _int_field(form, name: str, default: int | None, minimum: int | None = None) -> int | None:
    value = _int_param(form, name, minimum)
    return default if value is None else value


def _config_lines(text: str) -> dict[str, str]:
    """`key=value` lines of a form's text area (blank lines skipped)."""
    from ..cli.topics import parse_configs

    return parse_configs([ln.strip() for ln in text.splitlines() if ln.strip()], "config")
