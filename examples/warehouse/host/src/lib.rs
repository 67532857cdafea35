//! The warehouse agent's tools on the host's database (the binary is `warehouse`).

pub mod tools;
