"""DescribeLogDirs: each log dir with the partitions it holds and their sizes on disk, and
(v4+) the volume's total and usable bytes, as `kafka-log-dirs.sh` and cluster UIs read them.

A null topic list asks for every partition; otherwise only the named partitions that exist
are listed. On one node every log is current and its high watermark is its end, so the
offset lag is 0 and no log is a future one. A log dir whose volume cannot be read answers
KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import os
import shutil

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from .api import Api
from .common import NO_THROTTLE

API_KEY = 35


async def handle(broker, request, connection):
    version = request.api_version
    mod = response_module(API_KEY, version)
    if broker.authorizer is not None and not authz.cluster_allowed(broker, connection, authz.Op.DESCRIBE):
        return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, results=())
    asked = request.body.topics
    wanted = None if asked is None else {t.topic: set(t.partitions) for t in asked}
    by_dir: dict[str, dict[str, list]] = {d: {} for d in broker.config.log_dirs}
    for (topic, index), lg in sorted(broker.log_manager.logs.items()):
        if wanted is not None and index not in wanted.get(topic, ()):
            continue
        log_dir = os.path.dirname(os.path.abspath(lg.directory))
        by_dir.setdefault(log_dir, {}).setdefault(topic, []).append(make(
            mod.DescribeLogDirsPartition, partition_index=index, partition_size=lg.size,
            offset_lag=0, is_future_key=False))
    results = []
    for log_dir, topics in by_dir.items():
        code, total, usable = ErrorCode.none, -1, -1
        try:
            usage = shutil.disk_usage(log_dir)
            total, usable = usage.total, usage.free  # free: what an unprivileged user may use
        except OSError:
            code = ErrorCode.kafka_storage_error
        results.append(make(
            mod.DescribeLogDirsResult, error_code=code, log_dir=log_dir, total_bytes=total,
            usable_bytes=usable,
            topics=tuple(make(mod.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                         for name, parts in topics.items())))
    return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                results=tuple(results))


APIS = [Api(API_KEY, "DescribeLogDirs", 0, 4, handle)]
