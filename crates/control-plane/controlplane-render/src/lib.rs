//! Pure rendering for the control-plane operator: oslo.config files, uwsgi configuration, the
//! Kubernetes objects of a service (Secrets, Jobs, Deployment, Service), fernet/credential key
//! material and its rotation, and the hashes that key Jobs and roll Deployments. No I/O: the
//! controllers apply what these functions return, and the boot proof runs the real Keystone
//! from exactly this output.

pub mod authtoken;
pub mod cache;
pub mod cinder;
pub mod credential_keys;
pub mod database;
pub mod glance;
pub mod hash;
pub mod horizon;
pub mod ini;
pub mod keys;
pub mod keystone;
pub mod messaging;
pub mod neutron;
pub mod nova;
pub mod objects;
pub mod placement;
pub mod secrets;
pub mod service_user;
pub mod tls;
pub mod uwsgi;
pub mod zones;

pub use hash::InputHash;
pub use ini::Ini;
pub use keys::KeyRepository;
