//! The store's own handles on the database: a [`Session`] (one connection), a [`Tx`]
//! (a transaction on one) and a [`Prepared`] statement. The rest of the program holds
//! these and hands them to the store's functions; the driver's types stay in here.

use std::time::Duration;

use crate::error::Result;
use postgres::fallible_iterator::FallibleIterator;

/// One open connection to PostgreSQL. Only the store runs statements on it.
pub struct Session(postgres::Client);

/// A transaction on a [`Session`], begun by [`Session::transaction`] or
/// `store::begin_read_only`; rolled back when dropped without [`Tx::commit`].
pub struct Tx<'a>(postgres::Transaction<'a>);

/// A statement prepared on one session, for that session only.
#[derive(Clone)]
pub struct Prepared(pub(crate) postgres::Statement);

impl Session {
    pub(crate) fn new(client: postgres::Client) -> Self {
        Session(client)
    }

    /// The driver's client, inside the store.
    pub(crate) fn pg(&mut self) -> &mut postgres::Client {
        &mut self.0
    }

    pub(crate) fn pg_ref(&self) -> &postgres::Client {
        &self.0
    }

    /// The driver's client itself, for the integration tests' own statements on a
    /// session the store opened (a fault injected, a setting changed under a run).
    /// Only with the `testing` feature: the program's rooms never call it, their SQL
    /// is the store's.
    #[cfg(feature = "testing")]
    pub fn driver_for_tests(&mut self) -> &mut postgres::Client {
        &mut self.0
    }

    /// A session of the driver's client, for the integration tests' own connections
    /// (the `testing` feature only).
    #[cfg(feature = "testing")]
    pub fn from_driver(client: postgres::Client) -> Self {
        Session(client)
    }

    /// Whether the connection is gone (the server ended it, or the network did).
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    /// Begins a transaction (the session's default isolation, read committed).
    pub fn transaction(&mut self) -> Result<Tx<'_>> {
        Ok(Tx(self.0.transaction()?))
    }

    /// Waits up to `slice` for a notification on a channel this session listens on
    /// (`store::listen`); when one came, drains the others already there (several
    /// commits may have notified: one wake serves them all). Whether one came.
    pub fn wait_for_notification(&mut self, slice: Duration) -> Result<bool> {
        let mut notifications = self.0.notifications();
        if notifications.timeout_iter(slice).next()?.is_some() {
            while notifications.iter().next()?.is_some() {}
            return Ok(true);
        }
        Ok(false)
    }
}

impl<'a> Tx<'a> {
    pub(crate) fn new(tx: postgres::Transaction<'a>) -> Self {
        Tx(tx)
    }

    /// The driver's transaction, inside the store.
    pub(crate) fn pg(&mut self) -> &mut postgres::Transaction<'a> {
        &mut self.0
    }

    /// Commits the transaction.
    pub fn commit(self) -> Result<()> {
        Ok(self.0.commit()?)
    }
}

pub(crate) mod sealed {
    /// What the store's statements run on: the driver's client or transaction.
    pub trait Driver {
        type Pg: postgres::GenericClient + Driver;
        fn pg(&mut self) -> &mut Self::Pg;
    }

    /// A statement as the driver takes it: its text, or prepared.
    pub trait Statement {
        type Pg: postgres::ToStatement + ?Sized;
        fn stmt(&self) -> &Self::Pg;
    }
}

/// A statement's text or the statement prepared from it ([`Prepared`]): what a store
/// function that runs either takes.
pub trait Sql: sealed::Statement {}

impl<T: sealed::Statement + ?Sized> Sql for T {}

impl sealed::Statement for str {
    type Pg = str;
    fn stmt(&self) -> &str {
        self
    }
}

impl sealed::Statement for String {
    type Pg = String;
    fn stmt(&self) -> &String {
        self
    }
}

impl sealed::Statement for Prepared {
    type Pg = postgres::Statement;
    fn stmt(&self) -> &postgres::Statement {
        &self.0
    }
}

/// A [`Session`] or a [`Tx`]: what a store function that runs in either takes.
pub trait Conn: sealed::Driver {}

impl<T: sealed::Driver> Conn for T {}

impl sealed::Driver for Session {
    type Pg = postgres::Client;
    fn pg(&mut self) -> &mut postgres::Client {
        &mut self.0
    }
}

impl<'a> sealed::Driver for Tx<'a> {
    type Pg = postgres::Transaction<'a>;
    fn pg(&mut self) -> &mut postgres::Transaction<'a> {
        &mut self.0
    }
}

/// The driver's own client and transaction: what the store's functions run on inside
/// (a [`Session`]'s or a [`Tx`]'s), and the integration tests' sessions of their own.
impl sealed::Driver for postgres::Client {
    type Pg = postgres::Client;
    fn pg(&mut self) -> &mut postgres::Client {
        self
    }
}

impl<'a> sealed::Driver for postgres::Transaction<'a> {
    type Pg = postgres::Transaction<'a>;
    fn pg(&mut self) -> &mut postgres::Transaction<'a> {
        self
    }
}
