//! No code: this package exists for its manifest. See `Cargo.toml`.
