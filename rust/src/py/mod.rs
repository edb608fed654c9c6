//! PyO3 wrappers: the `racer_ref._core` extension module. Thin by design: every wrapper
//! converts arguments, calls the pure-Rust core and maps `crate::error::Error` to a Python
//! exception. No algorithm lives here.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;

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

/// "element 3 " inside messages about sequences, "" for scalars.
fn element(index: Option<usize>) -> String {
    index.map_or_else(String::new, |i| format!("element {i} "))
}

/// A Python integer argument as `i64`, the one integer reader of every wrapper (the
/// twin's `int_value`). `bool`, floats and other non-integers raise `TypeError`;
/// integers beyond 64 bits raise `ValueError` (they are outside every range we accept).
pub(crate) fn int_value(
    obj: &Bound<'_, PyAny>,
    arg: &'static str,
    index: Option<usize>,
) -> PyResult<i64> {
    let type_error = || {
        let name = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        PyTypeError::new_err(format!(
            "{arg}: {}must be an int, got {name}",
            element(index)
        ))
    };
    if obj.is_instance_of::<PyBool>() {
        return Err(type_error());
    }
    match obj.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            let shown = obj.str().map(|s| s.to_string()).unwrap_or_default();
            Err(PyValueError::new_err(format!(
                "{arg}: {}is out of range, got {shown}",
                element(index)
            )))
        }
        Err(_) => Err(type_error()),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    automaton::register(m)?;
    drafter::register(m)?;
    Ok(())
}
