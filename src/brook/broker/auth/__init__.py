"""Who a connection is and what it may do: the SASL exchange before a connection's first
request (`authenticator`, on the mechanisms of brook.security), and the handlers' one door to
the authorizer (`authz`). The SaslHandshake and SaslAuthenticate of an authenticated connection
(re-authentication) are served by handlers.sasl, which uses this package, never the reverse."""
