"""The coordinators, sans-I/O, split as Kafka's modules are: ``common`` (the runtime they all run
on) and ``group`` (consumer groups and their offsets on ``__consumer_offsets``); the transaction
coordinator lands beside them. Only a container: it holds nothing and imports nothing itself."""
