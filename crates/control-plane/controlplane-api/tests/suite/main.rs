//! The crate's integration tests as one test binary: each module was a test binary of its own
//! (they linked the whole workspace each). `scripts/run-tests.py` runs each module in a process
//! of its own, as before; by hand: `cargo test -p controlplane-api --test suite MODULE::`.

mod crds;
mod examples;
mod option_schemas;
mod reference;
mod validation;
