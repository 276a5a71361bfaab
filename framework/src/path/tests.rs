//! Unit tests of the parent module.
#![allow(clippy::unwrap_used)]

use super::*;

const ID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

fn err(path: &str) -> PathError {
    validate_path(path).unwrap_err()
}

#[test]
fn valid_paths() {
    for path in [
        "/",
        "/a",
        "/a/b/c",
        "/zookeeperx",
        "/with space/and-dash_under.score",
        "/a.b/..c/.d/e..",
        "/...",
        "/ünïcödé/日本語",
        "/\u{A0}/\u{D7FF}/\u{F900}/\u{FFEF}",
    ] {
        assert_eq!(validate_path(path), Ok(()), "{path:?}");
    }
    let longest = format!("/{}", "a".repeat(MAX_PATH_LEN - 1));
    assert_eq!(validate_path(&longest), Ok(()));
}

#[test]
fn structural_rules() {
    assert_eq!(err(""), PathError::Empty);
    assert_eq!(err("a/b"), PathError::NotAbsolute { path: "a/b".into() });
    assert_eq!(err("/a/"), PathError::TrailingSlash { path: "/a/".into() });
    assert_eq!(err("//"), PathError::TrailingSlash { path: "//".into() });
    assert_eq!(
        err("/a//b"),
        PathError::EmptyComponent {
            path: "/a//b".into(),
            index: 3
        }
    );
    assert_eq!(
        err("//a"),
        PathError::EmptyComponent {
            path: "//a".into(),
            index: 1
        }
    );
}

#[test]
fn relative_components() {
    for (path, index) in [
        ("/.", 1),
        ("/..", 1),
        ("/a/./b", 3),
        ("/a/../b", 3),
        ("/a/b/.", 5),
        ("/a/b/..", 5),
    ] {
        assert_eq!(
            err(path),
            PathError::RelativeComponent {
                path: path.into(),
                index
            },
            "{path:?}"
        );
    }
}

#[test]
fn forbidden_characters() {
    for (ch, ok) in [
        ('\0', false),
        ('\u{1}', false),
        ('\n', false),
        ('\u{1F}', false),
        (' ', true),
        ('~', true),
        ('\u{7F}', false),
        ('\u{85}', false),
        ('\u{9F}', false),
        ('\u{A0}', true),
        ('\u{D7FF}', true),
        ('\u{E000}', false),
        ('\u{F8FF}', false),
        ('\u{F900}', true),
        ('\u{FFEF}', true),
        ('\u{FFF0}', false),
        ('\u{FFFD}', false),
        ('\u{FFFF}', false),
        ('\u{10000}', false),
        ('😀', false),
    ] {
        let path = format!("/é/a{ch}b");
        let got = validate_path(&path);
        if ok {
            assert_eq!(got, Ok(()), "{ch:?}");
        } else {
            assert_eq!(
                got,
                Err(PathError::InvalidCharacter {
                    path: path.clone(),
                    index: 5,
                    ch
                }),
                "{ch:?}"
            );
        }
    }
}

#[test]
fn leftmost_problem_is_reported() {
    assert!(matches!(
        err("/a\u{1}/./b"),
        PathError::InvalidCharacter { index: 2, .. }
    ));
    assert!(matches!(
        err("/./a\u{1}"),
        PathError::RelativeComponent { index: 1, .. }
    ));
    assert!(matches!(
        err("/a//\0"),
        PathError::EmptyComponent { index: 3, .. }
    ));
}

#[test]
fn length_limit() {
    let too_long = format!("/{}", "a".repeat(MAX_PATH_LEN));
    assert_eq!(
        err(&too_long),
        PathError::TooLong {
            len: MAX_PATH_LEN + 1,
            max: MAX_PATH_LEN
        }
    );
    // Counted in bytes: 2049 two-byte characters are too many.
    let wide = format!("/{}", "é".repeat(2048));
    assert!(matches!(err(&wide), PathError::TooLong { len: 4097, .. }));
}

#[test]
fn recipe_paths() {
    assert_eq!(validate_recipe_path("/locks/orders"), Ok(()));
    assert_eq!(validate_recipe_path("/zookeeperx"), Ok(()));
    assert_eq!(validate_recipe_path("/zookeeperx/lock"), Ok(()));
    assert_eq!(validate_recipe_path("/zoo/keeper"), Ok(()));
    assert_eq!(validate_recipe_path("/"), Err(PathError::Root));
    for path in ["/zookeeper", "/zookeeper/quota", "/zookeeper/config/x"] {
        assert_eq!(
            validate_recipe_path(path),
            Err(PathError::Reserved { path: path.into() })
        );
    }
    // Ordinary rules come first.
    assert!(matches!(
        validate_recipe_path("/zookeeper/"),
        Err(PathError::TrailingSlash { .. })
    ));
    assert_eq!(validate_recipe_path(""), Err(PathError::Empty));
}

#[test]
fn node_names() {
    for name in ["a", "lock-", "_c_x-lock-0000000001", "...", "日本", " "] {
        assert_eq!(validate_node_name(name), Ok(()), "{name:?}");
    }
    assert_eq!(validate_node_name(""), Err(PathError::EmptyName));
    assert_eq!(
        validate_node_name("a/b"),
        Err(PathError::SlashInName {
            name: "a/b".into(),
            index: 1
        })
    );
    assert!(matches!(
        validate_node_name("/a"),
        Err(PathError::SlashInName { index: 0, .. })
    ));
    for name in [".", ".."] {
        assert_eq!(
            validate_node_name(name),
            Err(PathError::RelativeComponent {
                path: name.into(),
                index: 0
            })
        );
    }
    assert_eq!(
        validate_node_name("ab\u{7}"),
        Err(PathError::InvalidCharacter {
            path: "ab\u{7}".into(),
            index: 2,
            ch: '\u{7}'
        })
    );
    assert!(validate_node_name("a\0").is_err());
    assert!(validate_node_name("🦀").is_err());
    assert_eq!(validate_node_name(&"n".repeat(MAX_NODE_NAME_LEN)), Ok(()));
    assert_eq!(
        validate_node_name(&"n".repeat(MAX_NODE_NAME_LEN + 1)),
        Err(PathError::TooLong {
            len: 256,
            max: MAX_NODE_NAME_LEN
        })
    );
}

#[test]
fn messages_name_the_path_and_rule() {
    assert_eq!(err("/a/").to_string(), r#"path "/a/" ends with '/'"#);
    assert_eq!(
        err("/a\u{1}").to_string(),
        r#""/a\u{1}" contains the forbidden character '\u{1}' at byte 2"#
    );
    assert_eq!(
        validate_recipe_path("/zookeeper/q")
            .unwrap_err()
            .to_string(),
        r#"path "/zookeeper/q" is at or under "/zookeeper", which the ZooKeeper server reserves"#
    );
    assert!(err("/a/../b").to_string().contains("\"/a/../b\""));
    assert!(err("x").to_string().contains("does not start with '/'"));
}

#[test]
fn join_handles_slashes() {
    assert_eq!(join("/", "a"), "/a");
    assert_eq!(join("/a", "b"), "/a/b");
    assert_eq!(join("/a/", "b"), "/a/b");
    assert_eq!(join("/a", "/b"), "/a/b");
    assert_eq!(join("/a/", "/b/c"), "/a/b/c");
    assert_eq!(join("", "a"), "/a");
    assert_eq!(join("/a", ""), "/a");
    assert_eq!(join("/", ""), "/");
    assert_eq!(join("", ""), "/");
}

#[test]
fn split_and_parents() {
    assert_eq!(split("/a/b/c"), ("/a/b", "c"));
    assert_eq!(split("/a"), ("/", "a"));
    assert_eq!(split("/"), ("/", ""));
    assert_eq!(split("name"), ("", "name"));
    assert_eq!(split("/é/ü"), ("/é", "ü"));
    for path in ["/a", "/a/b", "/x/y/z-0000000001"] {
        let (parent, name) = split(path);
        assert_eq!(join(parent, name), path);
    }

    assert_eq!(parents("/a/b/c").collect::<Vec<_>>(), ["/a", "/a/b"]);
    assert_eq!(parents("/a/b/c").rev().collect::<Vec<_>>(), ["/a/b", "/a"]);
    assert_eq!(parents("/a").count(), 0);
    assert_eq!(parents("/").count(), 0);
    assert_eq!(parents("/ä/ö/ü").collect::<Vec<_>>(), ["/ä", "/ä/ö"]);
}

#[test]
fn sequence_display_matches_zookeeper() {
    assert_eq!(Sequence::new(0).to_string(), "0000000000");
    assert_eq!(Sequence::new(42).to_string(), "0000000042");
    assert_eq!(Sequence::new(i32::MAX as u32).to_string(), "2147483647");
    assert_eq!(Sequence::new(1 << 31).to_string(), "-2147483648");
    assert_eq!(Sequence::new(u32::MAX - 6).to_string(), "-000000007");
}

#[test]
fn sequence_parsing() {
    let parse = |s: &str| Sequence::parse_suffix(s).map(Sequence::value);
    assert_eq!(parse("lock-0000000042"), Some(42));
    assert_eq!(parse("/locks/lock-0000000042"), Some(42));
    assert_eq!(parse("0000000000"), Some(0));
    assert_eq!(parse("x2147483647"), Some(2_147_483_647));
    assert_eq!(
        parse(&format!("{PROTECTED_PREFIX}{ID}-lock-0000000007")),
        Some(7)
    );
    assert_eq!(parse("item2024-0000000003"), Some(3));
    // Wrapped counters continue after i32::MAX.
    assert_eq!(parse("lock--2147483648"), Some(1 << 31));
    assert_eq!(parse("lock--000000007"), Some(u32::MAX - 6));
    assert_eq!(parse("lock-123456789"), Some(u32::MAX - 123_456_788));
    for name in [
        "",
        "lock",
        "lock-",
        "lock-12345678a0",
        "x-12345678",
        "123456789",
    ] {
        assert_eq!(parse(name), None, "{name:?}");
    }
    assert_eq!(parse("lock-000000000٣"), None);
    // Exact counters.
    assert_eq!(
        Sequence::parse("-2147483648").map(Sequence::value),
        Some(1 << 31)
    );
    assert_eq!(Sequence::parse("-0000000005").map(Sequence::value), Some(5));
    assert_eq!(Sequence::parse("2147483648"), None);
    assert_eq!(Sequence::parse("12345"), None);
}

#[test]
fn sequence_round_trips_through_display() {
    let mut values = vec![0, 1, 9, 10, 999_999_999, 1 << 31, u32::MAX, i32::MAX as u32];
    let mut x: u32 = 0x2545_F491;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        values.push(x);
    }
    for v in values {
        let text = Sequence::new(v).to_string();
        // Exact text is unambiguous except for wrapped values whose
        // text has ten digits after the sign (see `parse`).
        let wrapped_wide = v > 1 << 31 && text.len() == 11;
        if !wrapped_wide {
            assert_eq!(Sequence::parse(&text), Some(Sequence::new(v)), "{text}");
        }
    }
}

#[test]
fn sequences_order_as_unsigned_numbers() {
    let nine = Sequence::parse_suffix("b-lock-0000000009").unwrap();
    let ten = Sequence::parse_suffix("a-lock-0000000010").unwrap();
    assert!(ten > nine);
    let last = Sequence::parse_suffix("lock-2147483647").unwrap();
    let wrapped = Sequence::parse_suffix("lock--2147483648").unwrap();
    assert!(wrapped > last, "the wrap does not jump the queue");
    let mut names = [
        "z-0000000100",
        "a-0000000010",
        "m-0000000009",
        "b-0000000011",
    ];
    names.sort_by_key(|n| Sequence::parse_suffix(n));
    assert_eq!(
        names,
        [
            "m-0000000009",
            "a-0000000010",
            "b-0000000011",
            "z-0000000100"
        ]
    );
    assert_eq!(u32::from(Sequence::from(5)), 5);
}

#[test]
fn protection_helpers() {
    let prefix = protected_prefix(ID);
    assert_eq!(prefix, format!("_c_{ID}-"));
    assert_eq!(prefix.len(), 40);

    let name = format!("{prefix}lock-0000000001");
    assert!(is_protected(&name));
    assert_eq!(protected_id(&name), Some(ID));
    assert_eq!(strip_protection(&name), "lock-0000000001");

    // The prefix alone is a protected name with nothing after it.
    assert!(is_protected(&prefix));
    assert_eq!(strip_protection(&prefix), "");

    // Upper-case hex is accepted.
    let upper = protected_prefix(&ID.to_uppercase());
    assert!(is_protected(&upper));

    for bad in [
        "lock-0000000001".to_owned(),
        "_c_".to_owned(),
        format!("_c_{ID}"),                          // no '-' after the id
        format!("_c_{ID}xlock"),                     // wrong separator
        format!("_d_{ID}-lock"),                     // wrong marker
        format!("_c_{}-lock", &ID[..35]),            // id too short
        format!("_c_{}g-lock", &ID[..35]),           // not hex
        format!("_c_{}-lock", ID.replace('-', "_")), // dashes misplaced
        format!("_c_{}-lock", ID.replace('-', "")),  // no dashes at all
        "_c_0f8fad5b-d9cb-469f-a165-7086772895é-x".to_owned(), // multi-byte
    ] {
        assert!(!is_protected(&bad), "{bad:?}");
        assert_eq!(protected_id(&bad), None, "{bad:?}");
        assert_eq!(strip_protection(&bad), bad, "{bad:?}");
    }
    assert_eq!(PROTECTED_PREFIX, "_c_");
}

#[test]
fn cut_keeps_short_text_and_shortens_long_text_on_a_character_boundary() {
    assert_eq!(cut("/a/b"), "/a/b");
    let exact = "x".repeat(MESSAGE_CUT);
    assert_eq!(cut(&exact), exact);
    let long = "é".repeat(100_000);
    let shown = cut(&long);
    assert!(shown.starts_with(&"é".repeat(MESSAGE_CUT)), "{shown}");
    assert!(shown.ends_with("… (100000 characters in all)"), "{shown}");
    assert!(shown.chars().count() < MESSAGE_CUT + 40);
}
