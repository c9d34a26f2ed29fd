//! Analytic models of stabilization latency (ICS'06 section 5) and the statistics that compare
//! them with measurements.

pub mod latency;
