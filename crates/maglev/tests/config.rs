//! Validation: every error names the field or backend at fault.

use fp_maglev::{Backend, Config, Error, Table};

#[test]
fn size_must_be_prime_and_in_range() {
    let e = Config::new(65_536, 0).unwrap_err();
    assert_eq!(
        e,
        Error::SizeNotPrime {
            size: 65_536,
            below: Some(65_521),
            above: Some(65_537)
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("`size`") && msg.contains("65536") && msg.contains("65537"),
        "{msg}"
    );
    assert!(matches!(
        Config::new(1, 0),
        Err(Error::SizeOutOfRange { .. })
    ));
    assert!(matches!(
        Config::new(0, 0),
        Err(Error::SizeOutOfRange { .. })
    ));
    assert!(matches!(
        Config::new(Config::MAX_SIZE as u64 + 1, 0),
        Err(Error::SizeOutOfRange { .. })
    ));
    assert!(Config::new(u64::MAX, 0)
        .unwrap_err()
        .to_string()
        .contains("`size`"));
    for p in [2u64, 3, 13, 65_537, 655_373, 268_435_399] {
        assert_eq!(Config::new(p, 0).unwrap().size() as u64, p);
    }
    assert_eq!(Config::default(), Config::new(65_537, 0).unwrap());
}

#[test]
fn backend_errors_name_the_backend() {
    let cfg = Config::new(13, 0).unwrap();
    assert_eq!(Table::build(&cfg, &[]).unwrap_err(), Error::NoBackends);
    let e = Table::build(
        &cfg,
        &[Backend::new("a"), Backend::new(""), Backend::new("b")],
    )
    .unwrap_err();
    assert_eq!(e, Error::EmptyName { index: 1 });
    assert!(e.to_string().contains("#1") && e.to_string().contains("`name`"));
    let e = Table::build(
        &cfg,
        &[Backend::new("x"), Backend::new("y"), Backend::new("x")],
    )
    .unwrap_err();
    assert_eq!(
        e,
        Error::DuplicateName {
            name: "x".into(),
            first: 0,
            second: 2
        }
    );
    assert!(e.to_string().contains("\"x\""));
    let e = Table::build(&cfg, &[Backend::weighted("z", 0)]).unwrap_err();
    assert!(e.to_string().contains("\"z\"") && e.to_string().contains("`weight`"));
    let many: Vec<Backend> = (0..14).map(|i| Backend::new(format!("{i}"))).collect();
    let e = Table::build(&cfg, &many).unwrap_err();
    assert_eq!(
        e,
        Error::SizeTooSmall {
            size: 13,
            backends: 14
        }
    );
    let too_many: Vec<Backend> = (0..65_536).map(|i| Backend::new(format!("{i}"))).collect();
    assert!(matches!(
        Table::build(&Config::new(65_537, 0).unwrap(), &too_many),
        Err(Error::TooManyBackends {
            count: 65_536,
            max: 65_535
        })
    ));
}

#[test]
fn diff_needs_equal_sizes() {
    let a = Table::build(&Config::new(13, 0).unwrap(), &[Backend::new("a")]).unwrap();
    let b = Table::build(&Config::new(17, 0).unwrap(), &[Backend::new("a")]).unwrap();
    assert_eq!(
        a.diff(&b).unwrap_err(),
        Error::SizeMismatch { a: 13, b: 17 }
    );
}

#[test]
fn one_backend_owns_everything_and_m_equal_n_works() {
    let cfg = Config::new(13, 0).unwrap();
    let t = Table::build(&cfg, &[Backend::new("only")]).unwrap();
    assert!(t.entries().iter().all(|&e| e == 0));
    let bs: Vec<Backend> = (0..13).map(|i| Backend::new(format!("b{i}"))).collect();
    let t = Table::build(&cfg, &bs).unwrap();
    assert_eq!(t.counts(), vec![1; 13]);
}
