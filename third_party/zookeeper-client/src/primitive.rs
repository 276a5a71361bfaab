//! `enum`s carried on the wire as an `i32` (zk-curator's `light-deps.patch`):
//! the conversions to and from the number that upstream derives with
//! num_enum, written by a `macro_rules!` so that no proc-macro (and no TOML
//! parser behind it) is built.

use std::marker::PhantomData;

/// A number that no variant of `T` has.
#[derive(Debug)]
pub struct TryFromPrimitiveError<T> {
    pub number: i32,
    _enum: PhantomData<T>,
}

impl<T> TryFromPrimitiveError<T> {
    pub fn new(number: i32) -> Self {
        TryFromPrimitiveError { number, _enum: PhantomData }
    }
}

/// Declares a `#[repr(i32)]` enum whose variants all have an explicit
/// value, with `From<Enum> for i32`, `TryFrom<i32> for Enum` and
/// `Enum::ALL` (every variant, in declaration order).
macro_rules! primitive_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(i32)]
        $vis enum $name {
            $( $(#[$variant_meta])* $variant = $value ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            #[allow(dead_code)]
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
        }

        impl From<$name> for i32 {
            fn from(value: $name) -> i32 {
                value as i32
            }
        }

        impl TryFrom<i32> for $name {
            type Error = $crate::primitive::TryFromPrimitiveError<$name>;

            fn try_from(number: i32) -> Result<Self, $crate::primitive::TryFromPrimitiveError<$name>> {
                $(
                    if number == $name::$variant as i32 {
                        return Ok($name::$variant);
                    }
                )+
                Err($crate::primitive::TryFromPrimitiveError::new(number))
            }
        }
    };
}

pub(crate) use primitive_enum;
