"""Authentication and authorization rules: the SASL mechanisms (PLAIN, SCRAM), Kafka's JAAS
syntax, the SASL settings of listeners, ACLs, the brokers' own login. Sans-I/O: the broker's
connection drives these with bytes; knows nothing of sockets or the broker."""
