"""One module per API family. Each declares `APIS` (`api.Api`: the API keys it serves, the
version range of each and its handler); the registry here is what ApiVersions advertises."""

from __future__ import annotations

from .api import Api


def registry() -> dict[int, Api]:
    from . import (acls, admin, api_versions, cluster, configs, delete_records, fetch, groups, list_offsets,
                   log_dirs, metadata, offsets, produce, producer_ids, replication, sasl, scram_users)
    from . import client_quotas, consumer_groups, describe_producers, transactions, txn_markers, txn_offsets

    apis: dict[int, Api] = {}
    for module in (api_versions, metadata, produce, fetch, list_offsets, admin, delete_records, configs,
                   log_dirs, cluster, producer_ids, groups, offsets, replication, sasl, scram_users,
                   acls, client_quotas, transactions, txn_markers, describe_producers, txn_offsets,
                   consumer_groups):
        for api in module.APIS:
            if api.key in apis:
                raise RuntimeError(f"api key {api.key} is served twice")
            apis[api.key] = api
    return apis
