//! Golden vectors: these numbers are part of flowplane's cross-balancer contract. Two balancers
//! (or two versions of flowplane) with the same config must build the same table; a change here is
//! a breaking change for every deployed cluster and must be called out as such.

use fp_maglev::{Backend, Config, Permutation, Table};

#[test]
fn permutations_of_names() {
    let cfg = Config::default();
    assert_eq!(cfg.size(), 65_537);
    let p = |n| Permutation::for_name(&cfg, n);
    assert_eq!(
        p("backend-0"),
        Permutation {
            offset: 21_682,
            skip: 37_644
        }
    );
    assert_eq!(
        p("10.0.0.1:80"),
        Permutation {
            offset: 49_819,
            skip: 31_978
        }
    );
    assert_eq!(
        p("a"),
        Permutation {
            offset: 41_687,
            skip: 29_411
        }
    );
    let seeded = Config::new(65_537, 0x5eed).unwrap();
    assert_eq!(
        Permutation::for_name(&seeded, "10.0.0.1:80"),
        Permutation {
            offset: 40_492,
            skip: 26_953
        }
    );
}

/// The worked example of docs/maglev.md: M = 13, backends a, b, c.
#[test]
fn small_table_by_hand() {
    let cfg = Config::new(13, 0).unwrap();
    let p = |n| Permutation::for_name(&cfg, n);
    assert_eq!(p("a"), Permutation { offset: 8, skip: 3 });
    assert_eq!(p("b"), Permutation { offset: 2, skip: 8 });
    assert_eq!(p("c"), Permutation { offset: 2, skip: 6 });
    // Round 1: a→8, b→2, c→(2,8 taken)1. Round 2: a→11, b→10, c→7. Round 3: a→(1)4, b→5,
    // c→0. Round 4: a→(7,10,0)3, b→(0,8,3,11)6, c→(6)12. Round 5: a→(6)9: full.
    let t = Table::build(
        &cfg,
        &[Backend::new("a"), Backend::new("b"), Backend::new("c")],
    )
    .unwrap();
    assert_eq!(t.entries(), [2, 2, 1, 0, 0, 1, 1, 2, 0, 0, 1, 0, 2]);
    assert_eq!(t.digest(), 0xce30_3021_5726_5f09);
}

/// Weights 1, 2, 3: turn times a: 0, 1, 2; b: 0, ½, 1, 1½; c: 0, ⅓, ⅔, 1, 1⅓, 1⅔, so the 13
/// turns go a b c | c | b | c | a b c | c | b | c | a: 3, 4 and 6 slots.
#[test]
fn small_weighted_table() {
    let cfg = Config::new(13, 0).unwrap();
    let bs = [
        Backend::weighted("a", 1),
        Backend::weighted("b", 2),
        Backend::weighted("c", 3),
    ];
    let t = Table::build(&cfg, &bs).unwrap();
    assert_eq!(t.entries(), [2, 2, 1, 1, 2, 1, 2, 2, 0, 0, 1, 0, 2]);
    assert_eq!(t.counts(), [3, 4, 6]);
    assert_eq!(t.digest(), 0x023f_52e5_c249_4bc2);
}

#[test]
fn default_size_thousand_backends() {
    let bs: Vec<Backend> = (0..1000)
        .map(|i| Backend::new(format!("backend-{i}")))
        .collect();
    let t = Table::build(&Config::default(), &bs).unwrap();
    assert_eq!(t.digest(), 0x7e7b_e324_7d4b_8cdc);
    // Canonical indices (names sorted as bytes: backend-0, backend-1, backend-10, …).
    assert_eq!(&t.entries()[..8], [903, 753, 816, 13, 679, 145, 93, 467]);
    assert_eq!(t.slot(0), 0);
    assert_eq!(t.slot(1), 1);
    assert_eq!(t.slot(0xdead_beef_cafe_f00d), 14_991);
}
