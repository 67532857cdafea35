// Present so that cargo applies this package's `[build-dependencies]`: they pin the
// features of dependencies that proc macros and build scripts share.
fn main() {}
