//! The webhooks' own certificate authority, pure: when to issue or rotate the CA and the
//! serving certificate, and how they are kept in a Secret. The webhook room carries out
//! what this plans.

pub mod certs;
