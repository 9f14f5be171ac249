"""ApiVersions: the versions of every API this broker serves (built from the handler
modules' declarations). An ApiVersions request at a version we do not know is answered in
v0 with UNSUPPORTED_VERSION and the full list, so the client can pick a version."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import response_class, response_module, make
from .api import Api
from .common import NO_THROTTLE

API_KEY = 18


def build_response(broker, version: int, error: ErrorCode = ErrorCode.none):
    mod = response_module(API_KEY, version)
    keys = tuple(make(mod.ApiVersion, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
                 for a in sorted(broker.apis.values(), key=lambda a: a.key))
    return make(response_class(API_KEY, version), error_code=error, api_keys=keys,
                throttle_time=NO_THROTTLE)


async def handle(broker, request, connection):
    return build_response(broker, request.api_version)


APIS = [Api(API_KEY, "ApiVersions", 0, 4, handle)]
