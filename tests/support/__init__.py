"""What the tests share: brokers as processes or in process, ZooKeeper, wire clients and
requests, and the fake-clock harnesses of the sans-I/O cores. Test modules import from here,
never from each other."""
