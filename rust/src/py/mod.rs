//! PyO3 wrappers: the `racer_ref._core` extension module. Thin by design: every wrapper
//! converts arguments, calls the pure-Rust core and maps `crate::error::Error` to a Python
//! exception. No algorithm lives here.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::error::Error;

mod automaton;
mod drafter;

/// The one bridge from the core's errors to Python exceptions.
impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        match e {
            Error::Value { .. } => PyValueError::new_err(e.to_string()),
            Error::Type { .. } => PyTypeError::new_err(e.to_string()),
        }
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    automaton::register(m)?;
    drafter::register(m)?;
    Ok(())
}
