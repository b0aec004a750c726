//! Durations as the command line and the spec write them (`30s`, `10m`, `1h`, `500ms`, or
//! a plain number of seconds): the zone init container's syntax (zone-wait/), one parser
//! for both, so that the operator accepts only timeouts the init container accepts.

pub use loki_zone_wait::parse_duration;
