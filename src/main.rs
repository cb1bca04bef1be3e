//! booking-expire's binary: the program is the library's `main` (parse → resolve → run →
//! report → exit), so that every room stays private to the library.

// No unsafe code: the compiler holds it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    booking_expire::main()
}
