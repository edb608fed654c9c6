//! PyO3 wrappers: the `racer_ref._core` extension module. Thin by design: a wrapper turns
//! Python objects into Rust values, calls the core (which validates) and turns the result
//! back. Every message a Python user reads about a bad argument comes from an
//! [`Error`] through the one bridge below, whether the core found it (a range) or the
//! conversion did (a float where an int belongs). No algorithm lives here.
//!
//! Threads: each class keeps its core object in a `Mutex` (the classes are `frozen`, so
//! PyO3 does no borrow tracking of its own). A call first converts its arguments, which
//! may run Python code (numpy, a generator), without the lock; then it takes the lock with
//! `try_lock` only around the core's work, which runs no Python code. Under the GIL, calls
//! from several threads on one object are therefore serialised, each one whole. A call
//! that finds the lock taken anyway (a free-threaded interpreter, or Python code such as a
//! garbage-collector callback running while the core works) is refused at once with a
//! `RuntimeError` that says the object is in use, never a wait, a panic or PyO3's bare
//! "Already borrowed".

use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::error::Error;

mod automaton;
mod chain;
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

/// Lock the core object of a `class` instance for one call, or refuse the call at once.
///
/// Errors: `RuntimeError` when another call holds the lock; `RuntimeError` when an earlier
/// call panicked while holding it (the core never panics on input, so that would be a bug;
/// the object is then not trusted again).
pub(crate) fn lock<'a, T>(inner: &'a Mutex<T>, class: &str) -> PyResult<MutexGuard<'a, T>> {
    inner.try_lock().map_err(|e| match e {
        TryLockError::WouldBlock => PyRuntimeError::new_err(format!(
            "{class}: in use by another call (from another thread, or from Python code that \
             runs inside that call, such as a garbage-collector callback); one {class} serves \
             one call at a time: give each thread its own, or serialise the calls with a lock"
        )),
        TryLockError::Poisoned(_) => PyRuntimeError::new_err(format!(
            "{class}: unusable, an earlier call failed inside the Rust core (please report \
             this bug); create a new {class}"
        )),
    })
}

/// The `TypeError` that `copy.copy`, `copy.deepcopy` and `pickle` get (the twin's
/// `limits.refuse_copy`, word for word): an object holds one request's state, and a copy
/// sharing it (or its lock) would defeat the in-use guard.
pub(crate) fn refuse_copy(class: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "{class}: cannot be copied or pickled (it holds one request's drafting state); \
         build a new {class} with the same settings instead"
    ))
}

/// The Python type name of `obj`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
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
        let what = element(index);
        Error::type_(arg, format!("{what}must be an int, got {}", type_name(obj)))
    };
    // bool is an int subclass in Python; the twin refuses it, so do we.
    if obj.is_instance_of::<PyBool>() {
        return Err(type_error().into());
    }
    match obj.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            let shown = obj.str().map(|s| s.to_string()).unwrap_or_default();
            let what = element(index);
            Err(Error::value(arg, format!("{what}is out of range, got {shown}")).into())
        }
        Err(_) => Err(type_error().into()),
    }
}

/// `None` or a missing argument means `default`, as in the twin; anything else is read by
/// [`int_value`].
pub(crate) fn int_or_default(
    obj: Option<&Bound<'_, PyAny>>,
    arg: &'static str,
    default: i64,
) -> PyResult<i64> {
    match obj {
        Some(v) if !v.is_none() => int_value(v, arg, None),
        _ => Ok(default),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    automaton::register(m)?;
    drafter::register(m)?;
    chain::register(m)?;
    Ok(())
}
