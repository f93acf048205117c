//! Reading a streamed event's JSON payload borrowed: only the fields an adapter reads, each
//! read the way `serde_json::Value`'s accessors read it, without building a `Value` tree per
//! event (a 4,500-delta answer parsed 4,500 trees and dropped them).
//!
//! Each wrapper accepts any JSON value in its place and keeps it only when it has the kind the
//! `Value` reading would use: [`Str`] is `Value::as_str`, [`Obj`] an object's fields (anything
//! else reads as absent, as `value.get(field)` on a non-object does), [`First`] is
//! `value.get(0)` of an array. A payload these cannot read as the `Value` reading would (a
//! duplicated key, where `Value` keeps the last; a lone UTF-16 surrogate escape; anything but
//! an object) fails to deserialize; the adapter then reads the `Value` (see
//! [`super::read_data`]) instead, so the result is the same either way.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Drains the rest of a map (keys and values unread).
fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Drains the rest of a sequence (elements unread).
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// A JSON value read as `Value::as_str` reads it: the string (borrowed from the payload when it
/// has no escapes), or `None` for any other value (and for an absent field).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Str<'a>(pub(crate) Option<Cow<'a, str>>);

impl<'a> Str<'a> {
    /// The string, if the value was one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Owned(s.to_string()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Owned(s))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Str<'a>, A::Error> {
                drain_map(map).map(|()| Str(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Str<'a>, A::Error> {
                drain_seq(seq).map(|()| Str(None))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A payload kept whole (`Option<Box<Value>>`, boxed so the struct holding it stays small: a
/// chunk struct is moved several times while it is read) as indexing the `Value` reads it:
/// `Value::Null` when the field is absent or `null`.
pub(crate) fn whole(v: &Option<Box<serde_json::Value>>) -> &serde_json::Value {
    static NULL: serde_json::Value = serde_json::Value::Null;
    v.as_deref().unwrap_or(&NULL)
}

/// A JSON value read as `Value::as_u64` reads it: a non-negative integer, or `None` for any
/// other value (a negative or fractional number, a string, an absent field).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct U64(pub(crate) Option<u64>);

impl<'de> Deserialize<'de> for U64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = U64;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<U64, E> {
                Ok(U64(Some(n)))
            }
            // serde_json hands non-negative integers to `visit_u64`: these are negative.
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<U64, E> {
                Ok(U64(u64::try_from(n).ok()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<U64, E> {
                Ok(U64(None))
            }
            fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<U64, E> {
                Ok(U64(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<U64, E> {
                Ok(U64(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<U64, E> {
                Ok(U64(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<U64, E> {
                Ok(U64(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<U64, E> {
                Ok(U64(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<U64, A::Error> {
                drain_map(map).map(|()| U64(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<U64, A::Error> {
                drain_seq(seq).map(|()| U64(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A JSON object's fields read as `T` (a struct whose fields all default), or `None` for any
/// other value: `value.get(field)` of a non-object is `None`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Obj<T>(pub(crate) Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Obj(None)
    }
}

/// A visitor that reads maps as `T` and every other value as absent.
struct ObjVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjVisitor<T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<T>, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<T>, A::Error> {
        drain_seq(seq).map(|()| None)
    }
    fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ObjVisitor(PhantomData)).map(Obj)
    }
}

/// The first element of a JSON array read as an object `T` (`value.get(0)`, then its fields),
/// the rest unread; `None` for an empty array, a first element that is not an object, or any
/// other value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct First<T>(pub(crate) Option<T>);

impl<T> Default for First<T> {
    fn default() -> Self {
        First(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = First<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<First<T>, A::Error> {
                let first = seq.next_element::<Obj<T>>()?.and_then(|o| o.0);
                drain_seq(seq).map(|()| First(first))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<First<T>, A::Error> {
                drain_map(map).map(|()| First(None))
            }
            fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<First<T>, E> {
                Ok(First(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<First<T>, E> {
                Ok(First(None))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Inner<'a> {
        #[serde(borrow)]
        s: Str<'a>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Outer<'a> {
        #[serde(borrow)]
        a: Str<'a>,
        #[serde(borrow)]
        o: Obj<Inner<'a>>,
        #[serde(borrow)]
        f: First<Inner<'a>>,
    }

    fn read(text: &str) -> Result<Outer<'_>, serde_json::Error> {
        serde_json::from_str(text)
    }

    fn s(v: &str) -> Str<'_> {
        Str(Some(Cow::Borrowed(v)))
    }

    #[test]
    fn each_field_reads_as_the_value_accessors_read_it() {
        // Strings: borrowed without escapes, owned with them; any other kind is absent.
        let o = read(r#"{"a":"x","o":{"s":"y\n"},"f":[{"s":"z"},7,{"s":"w"}]}"#).unwrap();
        assert_eq!(
            o,
            Outer {
                a: s("x"),
                o: Obj(Some(Inner {
                    s: Str(Some(Cow::Owned("y\n".into())))
                })),
                f: First(Some(Inner { s: s("z") })),
            }
        );
        assert!(matches!(o.a.0, Some(Cow::Borrowed(_))));
        for other in ["1", "-1", "1.5", "true", "null", "[1,[2]]"] {
            let text = format!(r#"{{"a":{other},"o":{other},"f":{other},"extra":{other}}}"#);
            assert_eq!(read(&text).unwrap(), Outer::default(), "{text}");
        }
        // An object without the fields read: present, each field absent.
        let text = r#"{"a":{"k":[1]},"o":{"k":{"x":1}},"f":{"k":1},"extra":{}}"#;
        assert_eq!(
            read(text).unwrap(),
            Outer {
                o: Obj(Some(Inner::default())),
                ..Outer::default()
            }
        );
        // An object first element's fields; a non-object first element or an empty array.
        assert_eq!(read(r#"{"f":[]}"#).unwrap(), Outer::default());
        assert_eq!(read(r#"{"f":["s",{"s":"z"}]}"#).unwrap(), Outer::default());
        assert_eq!(read("{}").unwrap(), Outer::default());
    }

    #[test]
    fn numbers_read_as_as_u64_reads_them() {
        #[derive(Debug, Default, Deserialize)]
        #[serde(default)]
        struct N {
            n: U64,
        }
        for (text, want) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("18446744073709551615", Some(u64::MAX)),
            ("-1", None),
            ("1.0", None),
            ("1e2", None),
            ("\"3\"", None),
            ("true", None),
            ("null", None),
            ("[3]", None),
            ("{\"n\":3}", None),
        ] {
            let json = format!(r#"{{"n":{text}}}"#);
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v["n"].as_u64(), want, "{text}");
            assert_eq!(
                serde_json::from_str::<N>(&json).unwrap().n,
                U64(want),
                "{text}"
            );
        }
        assert_eq!(serde_json::from_str::<N>("{}").unwrap().n, U64(None));
    }

    #[test]
    fn what_the_value_reading_reads_otherwise_fails_here() {
        // A duplicated key (`Value` keeps the last), a lone surrogate, invalid JSON.
        assert!(read(r#"{"a":"x","a":"y"}"#).is_err());
        assert!(read(r#"{"a":"\ud800"}"#).is_err());
        assert!(read(r#"{"a":"x""#).is_err());
        assert!(read(r#"{"a":"x"} trailing"#).is_err());
    }
}
