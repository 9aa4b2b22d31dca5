//! The throw-away PostgreSQL: a fresh database per call, usable, dropped afterwards.

#[test]
fn each_test_gets_a_fresh_database_that_is_dropped_after() {
    let a = herd_testkit::pg_db();
    let b = herd_testkit::pg_db();
    assert_ne!(a.url, b.url);
    let mut c = postgres::Client::connect(&a.url, postgres::NoTls).unwrap();
    c.batch_execute("CREATE TABLE t (x BIGINT); INSERT INTO t VALUES (1)").unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    drop(c);
    let url = a.url.clone();
    drop(a);
    assert!(postgres::Client::connect(&url, postgres::NoTls).is_err(), "dropped with its PgDb");
    postgres::Client::connect(&b.url, postgres::NoTls).unwrap();
}
