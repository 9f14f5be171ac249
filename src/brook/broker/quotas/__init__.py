"""Client quotas on the broker: the rules (`client_quotas`: which quota applies to a request, how
fast its client goes, how long it waits), their application to requests (`throttling`), and the
InitProducerId rate (`producer_id_quota`). Knows nothing of the handlers beyond their answers."""
