"""`brook console`: a web console for a Kafka-protocol cluster (brook's or any other), served
as a client of the cluster. See docs/console.md. It reaches the cluster only through the
protocol (brook.cli's client and operations, brook.client's connection) and knows nothing of
the broker's internals.

- `command`: the `brook console` command (its options, binding, the server's start)
- `app`: the Starlette application, its pages and its safety checks
- `backend`: what the pages show, from brook.cli's client and operations
- `lag`, `sampler`: the lag history kept in memory and the thread that fills it
- `reader`: reading a partition's records (the message browser, the offsets topic)
- `render`, `safety`: pure helpers: showing bytes and times; logins and CSRF tokens
"""
