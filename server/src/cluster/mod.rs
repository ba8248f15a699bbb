//! Cluster mode on NATS JetStream (`docs/cluster.md`), behind the `cluster` feature: a
//! partition's stream, the publisher an owner's store hands its frames to, the claim, and the
//! tail a replica applies (`stream`). The leases, the routing of requests to partitions and
//! the `cluster` commands are not built yet.

pub mod stream;
