//! Reconcilers of the control-plane operator.
