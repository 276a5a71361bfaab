//! TEMPORARY stand-in until the real path module lands.
#![allow(missing_docs)]
#[derive(thiserror::Error, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathError { #[error("bad path {0}")] Bad(String) }
pub const PROTECTED_PREFIX: &str = "_c_";
pub fn validate_path(p: &str) -> Result<(), PathError> { if p.starts_with('/') { Ok(()) } else { Err(PathError::Bad(p.into())) } }
pub fn validate_recipe_path(p: &str) -> Result<(), PathError> { validate_path(p) }
pub fn validate_node_name(_p: &str) -> Result<(), PathError> { Ok(()) }
pub fn join(parent: &str, child: &str) -> String { if parent == "/" { format!("/{child}") } else { format!("{parent}/{child}") } }
pub fn split(p: &str) -> (&str, &str) { match p.rfind('/') { Some(0) => ("/", &p[1..]), Some(i) => (&p[..i], &p[i+1..]), None => ("", p) } }
pub fn strip_protection(name: &str) -> &str { if name.starts_with("_c_") && name.len() > 40 { &name[40..] } else { name } }
