"""Authentication: the SASL mechanisms (PLAIN, SCRAM), Kafka's JAAS syntax and the SASL
settings of listeners. Sans-I/O: the broker's connection drives these with bytes."""
