//! The crate's integration tests as one test binary: each module was a test binary of its own
//! (they linked the whole workspace each). `scripts/run-tests.py` runs each module in a process
//! of its own, as before; by hand: `cargo test -p resource-api --test suite MODULE::`.

mod bad_input;
mod cel;
mod crds;
mod deploy;
mod examples;
mod olm_bundle;
mod reference;
