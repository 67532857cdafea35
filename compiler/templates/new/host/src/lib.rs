//! The __name__ agent's tool handlers (the binary is `__name__`).

pub mod tools;
