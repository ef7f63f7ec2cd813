//! An engine answer as the package's Python objects, with no JSON between: a serde
//! serializer whose structs become the dataclasses registered for their wire type's name
//! (`situate.types` registers them on import), made as the package's own builder makes them
//! (`object.__new__`, then the instance's `__dict__`, field by field; a field the class does
//! not have is left out), and whose other values become dicts, lists, strings, numbers and
//! `None`, as `json.loads` would make them.
//!
//! Written by hand: pythonize (the serde bridge for PyO3) makes only mappings of structs,
//! and the answer of a search is a hundred small records, whose JSON round trip and
//! dataclass building were most of the package's own time per search (BENCHMARKS.md).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use serde::ser::{self, Serialize};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The registered classes by wire type name, and the names of each one's fields.
pub(crate) struct Registry {
    classes: HashMap<String, (Py<PyAny>, Vec<String>)>,
    /// `object.__new__`.
    new: Py<PyAny>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// Registers `classes` (wire type name → dataclass), once per process.
#[pyfunction]
pub(crate) fn register_types(py: Python<'_>, classes: &Bound<'_, PyDict>) -> PyResult<()> {
    let dataclasses = py.import("dataclasses")?;
    let mut map = HashMap::new();
    for (name, cls) in classes.iter() {
        let fields: Vec<String> = dataclasses
            .call_method1("fields", (&cls,))?
            .try_iter()?
            .map(|f| f?.getattr("name")?.extract::<String>())
            .collect::<PyResult<_>>()?;
        map.insert(name.extract::<String>()?, (cls.unbind(), fields));
    }
    // A second registration (the module imported again) keeps the first.
    let new = py
        .import("builtins")?
        .getattr("object")?
        .getattr("__new__")?
        .unbind();
    let _ = REGISTRY.set(Registry { classes: map, new });
    Ok(())
}

/// `value` as Python objects.
pub(crate) fn to_python<'py, T: Serialize>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    value
        .serialize(Objects { py })
        .map_err(|e| PyValueError::new_err(e.0))
}

/// A serialization error (a key that is not a string: never in situate's answers).
#[derive(Debug)]
pub(crate) struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

impl From<std::convert::Infallible> for Error {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}

impl From<PyErr> for Error {
    fn from(e: PyErr) -> Self {
        Error(e.to_string())
    }
}

type Result<T> = std::result::Result<T, Error>;

#[derive(Clone, Copy)]
struct Objects<'py> {
    py: Python<'py>,
}

impl<'py> ser::Serializer for Objects<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;
    type SerializeSeq = Seq<'py>;
    type SerializeTuple = Seq<'py>;
    type SerializeTupleStruct = Seq<'py>;
    type SerializeTupleVariant = Seq<'py>;
    type SerializeMap = Map<'py>;
    type SerializeStruct = Struct<'py>;
    type SerializeStructVariant = Struct<'py>;

    fn serialize_bool(self, v: bool) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.to_owned().into_any())
    }
    fn serialize_i8(self, v: i8) -> Result<Self::Ok> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<Self::Ok> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<Self::Ok> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_u8(self, v: u8) -> Result<Self::Ok> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<Self::Ok> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<Self::Ok> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_f32(self, v: f32) -> Result<Self::Ok> {
        // As JSON carries an f32: its shortest decimal form, read back as a double.
        let shortest: f64 = v.to_string().parse().unwrap_or(f64::from(v));
        self.serialize_f64(shortest)
    }
    fn serialize_f64(self, v: f64) -> Result<Self::Ok> {
        Ok(v.into_pyobject(self.py)?.into_any())
    }
    fn serialize_char(self, v: char) -> Result<Self::Ok> {
        self.serialize_str(v.encode_utf8(&mut [0u8; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<Self::Ok> {
        Ok(PyString::new(self.py, v).into_any())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Self::Ok> {
        let items: Vec<u8> = v.to_vec();
        Ok(PyList::new(self.py, items)?.into_any())
    }
    fn serialize_none(self) -> Result<Self::Ok> {
        Ok(self.py.None().into_bound(self.py))
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Self::Ok> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Self::Ok> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Self::Ok> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Self::Ok> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Self::Ok> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Self::Ok> {
        let d = PyDict::new(self.py);
        d.set_item(variant, value.serialize(self)?)?;
        Ok(d.into_any())
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Seq<'py>> {
        Ok(Seq {
            py: self.py,
            items: Vec::with_capacity(len.unwrap_or(0)),
            variant: None,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'py>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'py>> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Seq<'py>> {
        let mut s = self.serialize_seq(Some(len))?;
        s.variant = Some(variant);
        Ok(s)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Map<'py>> {
        Ok(Map {
            py: self.py,
            dict: PyDict::new(self.py),
            key: None,
        })
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Struct<'py>> {
        let registry = REGISTRY.get();
        let target = match registry.and_then(|r| Some((r, r.classes.get(name)?))) {
            Some((r, (cls, fields))) => {
                let obj = r.new.bind(self.py).call1((cls.bind(self.py),))?;
                let dict = obj
                    .getattr("__dict__")?
                    .cast_into::<PyDict>()
                    .map_err(PyErr::from)?;
                Some((obj, fields.as_slice(), dict))
            }
            None => None,
        };
        Ok(Struct {
            py: self.py,
            dict: match &target {
                Some((_, _, d)) => d.clone(),
                None => PyDict::new(self.py),
            },
            object: target.as_ref().map(|(o, f, _)| (o.clone(), *f)),
            variant: None,
        })
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Struct<'py>> {
        let mut s = self.serialize_struct(name, len)?;
        s.variant = Some(variant);
        Ok(s)
    }
}

struct Seq<'py> {
    py: Python<'py>,
    items: Vec<Bound<'py, PyAny>>,
    variant: Option<&'static str>,
}

impl<'py> Seq<'py> {
    fn push<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        self.items.push(value.serialize(Objects { py: self.py })?);
        Ok(())
    }
    fn done(self) -> Result<Bound<'py, PyAny>> {
        let list = PyList::new(self.py, self.items)?.into_any();
        match self.variant {
            Some(v) => {
                let d = PyDict::new(self.py);
                d.set_item(v, list)?;
                Ok(d.into_any())
            }
            None => Ok(list),
        }
    }
}

/// The four sequence traits serde asks for, alike but for the method's name.
macro_rules! seq_impl {
    ($trait:ident, $method:ident) => {
        impl<'py> ser::$trait for Seq<'py> {
            type Ok = Bound<'py, PyAny>;
            type Error = Error;
            fn $method<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
                self.push(value)
            }
            fn end(self) -> Result<Self::Ok> {
                self.done()
            }
        }
    };
}

seq_impl!(SerializeSeq, serialize_element);
seq_impl!(SerializeTuple, serialize_element);
seq_impl!(SerializeTupleStruct, serialize_field);
seq_impl!(SerializeTupleVariant, serialize_field);

struct Map<'py> {
    py: Python<'py>,
    dict: Bound<'py, PyDict>,
    key: Option<Bound<'py, PyAny>>,
}

impl<'py> ser::SerializeMap for Map<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<()> {
        let k = key.serialize(Objects { py: self.py })?;
        if !k.is_instance_of::<PyString>() {
            return Err(Error("a map key that is not a string".into()));
        }
        self.key = Some(k);
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        let k = self
            .key
            .take()
            .ok_or_else(|| Error("a map value without its key".into()))?;
        self.dict
            .set_item(k, value.serialize(Objects { py: self.py })?)?;
        Ok(())
    }
    fn end(self) -> Result<Self::Ok> {
        Ok(self.dict.into_any())
    }
}

struct Struct<'py> {
    py: Python<'py>,
    /// The instance's `__dict__`, or the dict the struct becomes.
    dict: Bound<'py, PyDict>,
    /// The instance and its class's fields, for a registered struct.
    object: Option<(Bound<'py, PyAny>, &'static [String])>,
    variant: Option<&'static str>,
}

impl<'py> Struct<'py> {
    fn field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<()> {
        if let Some((_, fields)) = &self.object
            && !fields.iter().any(|f| f == key)
        {
            return Ok(());
        }
        self.dict
            .set_item(key, value.serialize(Objects { py: self.py })?)?;
        Ok(())
    }
    fn done(self) -> Result<Bound<'py, PyAny>> {
        let value = match self.object {
            Some((o, _)) => o,
            None => self.dict.into_any(),
        };
        match self.variant {
            Some(v) => {
                let d = PyDict::new(self.py);
                d.set_item(v, value)?;
                Ok(d.into_any())
            }
            None => Ok(value),
        }
    }
}

/// The two struct traits serde asks for.
macro_rules! struct_impl {
    ($trait:ident) => {
        impl<'py> ser::$trait for Struct<'py> {
            type Ok = Bound<'py, PyAny>;
            type Error = Error;
            fn serialize_field<T: ?Sized + Serialize>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<()> {
                self.field(key, value)
            }
            fn end(self) -> Result<Self::Ok> {
                self.done()
            }
        }
    };
}

struct_impl!(SerializeStruct);
struct_impl!(SerializeStructVariant);
