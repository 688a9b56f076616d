//! The synchronization primitives shared by the host and the engine (the descriptor table and
//! the memory registry), from `std` in a normal build and from `loom` under `--cfg loom`, so the
//! model-checking test (`tests/loom_table.rs`) explores the interleavings of the real code.
//!
//! Loom cannot track a plain `std::cell::UnsafeCell`: its `UnsafeCell` has no `get` returning a
//! raw pointer, but `with`/`with_mut`, which mark where an access starts and ends. The `std`
//! version here is a transparent wrapper with the same methods, inlined away: a normal build
//! compiles to what it did with `std::cell::UnsafeCell` directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
pub use self::checked::{SharedRef, UnsafeCell};
#[cfg(not(loom))]
pub use self::plain::{SharedRef, UnsafeCell};

#[cfg(not(loom))]
mod plain {
    /// `std::cell::UnsafeCell` with loom's access API.
    #[repr(transparent)]
    pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    /// A shared borrow of a cell's value: a plain reference.
    pub type SharedRef<'a, T> = &'a T;

    impl<T> UnsafeCell<T> {
        pub const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        /// Runs `f` with a pointer for reading the value.
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a pointer for writing the value.
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }

        /// A shared borrow of the value that outlives the call (where `with` cannot be used
        /// because the reader keeps the reference across other calls).
        ///
        /// # Safety
        /// Nobody writes the value while the borrow lives.
        #[inline(always)]
        pub unsafe fn shared(&self) -> SharedRef<'_, T> {
            // SAFETY: the caller's contract: no writer while the reference lives.
            unsafe { &*self.0.get() }
        }
    }
}

#[cfg(loom)]
mod checked {
    use std::marker::PhantomData;
    use std::ops::Deref;

    /// loom's `UnsafeCell`, with `shared` added.
    pub struct UnsafeCell<T>(loom::cell::UnsafeCell<T>);

    /// A shared borrow of a cell's value that loom counts as a read for as long as it lives,
    /// so a write by another thread in that time is reported as a data race.
    pub struct SharedRef<'a, T> {
        ptr: loom::cell::ConstPtr<T>,
        cell: PhantomData<&'a UnsafeCell<T>>,
    }

    impl<T> UnsafeCell<T> {
        #[track_caller]
        pub fn new(value: T) -> Self {
            Self(loom::cell::UnsafeCell::new(value))
        }

        #[track_caller]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            self.0.with(f)
        }

        #[track_caller]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            self.0.with_mut(f)
        }

        /// # Safety
        /// Nobody writes the value while the borrow lives (loom checks it).
        #[track_caller]
        pub unsafe fn shared(&self) -> SharedRef<'_, T> {
            SharedRef {
                ptr: self.0.get(),
                cell: PhantomData,
            }
        }
    }

    impl<T> Deref for SharedRef<'_, T> {
        type Target = T;

        fn deref(&self) -> &T {
            // SAFETY: `shared`'s caller promised no writer while this lives, and loom checks it
            // (the `ConstPtr` is a tracked read until dropped); the cell outlives `'a`.
            unsafe { self.ptr.deref() }
        }
    }
}
