//! # nicmsg-pmix: the PMIx client library, loaded at run time
//!
//! A rank started by a PMIx launcher (Open MPI's `mpirun`, `prterun`, `srun --mpi=pmix`) can
//! publish data with `PMIx_Put`/`PMIx_Commit`, meet every other rank of its job in a
//! `PMIx_Fence` that collects what everyone published, and read any rank's data with
//! `PMIx_Get`. [`Client`] offers exactly that, with strings as the only values, which is all
//! `nicmsg-bootstrap` needs to exchange addresses.
//!
//! Nothing links against libpmix: [`Client::init`] opens `libpmix.so.2` with `dlopen` the first
//! time it is called (and keeps it for the life of the process; unloading a library whose
//! progress thread may still be winding down is not worth the risk), so nicmsg builds and runs
//! where PMIx is not installed, and only a rank that asks for PMIx needs it.
//!
//! The few types and functions used are declared here, as `pmix_common.h` and `pmix.h` of
//! PMIx 3.x and 4.x define them (`libpmix.so.2` is the soname of both; the layouts used here
//! are the same in both and are checked by the tests against what the C compiler makes of
//! the installed headers, when they are installed). Every `unsafe` block of the crate is in
//! this file and says why it is sound.

use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use libloading::os::unix::{Library, Symbol, RTLD_GLOBAL, RTLD_NOW};

/// The library opened: the PMIx client library's soname (PMIx 2.x to 5.x).
pub const LIBRARY: &str = "libpmix.so.2";

/// Longest key PMIx accepts (`PMIX_MAX_KEYLEN`).
pub const MAX_KEY_LEN: usize = 511;

/// Longest string value [`Client::put`] publishes and [`Client::get`] accepts: far above what
/// nicmsg publishes (a few hundred bytes a rank), and a bound on what a malformed or foreign
/// value can make a rank copy.
pub const MAX_VALUE_LEN: usize = 64 << 10;

// ---------------------------------------------------------------------------------------------
// The ABI (pmix_common.h, pmix.h)

/// `PMIX_MAX_NSLEN`.
const MAX_NSLEN: usize = 255;
/// `pmix_status_t`.
type Status = c_int;
/// `pmix_rank_t`.
type Rank = u32;
/// `PMIX_SUCCESS`.
const SUCCESS: Status = 0;
/// `PMIX_RANK_WILDCARD`: every process of a namespace (job-level data is stored under it).
const RANK_WILDCARD: Rank = u32::MAX - 1;
/// `PMIX_GLOBAL`: data shared with processes on this node and on the others.
const SCOPE_GLOBAL: u8 = 3;

/// `pmix_data_type_t` codes (unchanged since PMIx 1).
mod data_type {
    pub const BOOL: u16 = 1;
    pub const STRING: u16 = 3;
    pub const SIZE: u16 = 4;
    pub const INT: u16 = 6;
    pub const INT32: u16 = 9;
    pub const UINT: u16 = 11;
    pub const UINT32: u16 = 14;
    pub const UINT64: u16 = 15;
    pub const BYTE_OBJECT: u16 = 27;
}

/// Attribute keys.
const KEY_COLLECT_DATA: &CStr = c"pmix.collect";
const KEY_TIMEOUT: &CStr = c"pmix.timeout";
const KEY_JOB_SIZE: &CStr = c"pmix.job.size";

/// `pmix_proc_t`: a namespace and a rank in it.
#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; MAX_NSLEN + 1],
    rank: Rank,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ByteObject {
    bytes: *mut c_char,
    size: usize,
}

/// The union of `pmix_value_t`, with the members nicmsg reads or writes. Its largest member in
/// C is 24 bytes (`pmix_envar_t`: two pointers and a char), which `_size` stands for, so that
/// the union, and arrays of `pmix_info_t`, have C's size.
#[repr(C)]
#[derive(Clone, Copy)]
union ValueData {
    flag: bool,
    string: *mut c_char,
    size: usize,
    integer: c_int,
    int32: i32,
    uint: u32,
    uint32: u32,
    uint64: u64,
    bo: ByteObject,
    _size: [u64; 3],
}

/// `pmix_value_t`: a type code and the value.
#[repr(C)]
#[derive(Clone, Copy)]
struct Value {
    type_: u16,
    data: ValueData,
}

/// `pmix_info_t`: an attribute (key, flags, value) passed to a call.
#[repr(C)]
struct Info {
    key: [c_char; MAX_KEY_LEN + 1],
    flags: u32,
    value: Value,
}

impl Info {
    fn new(key: &CStr, value: Value) -> Self {
        let mut info = Info {
            key: [0; MAX_KEY_LEN + 1],
            flags: 0,
            value,
        };
        for (slot, &byte) in info.key.iter_mut().zip(key.to_bytes()) {
            *slot = byte as c_char;
        }
        info
    }

    /// `PMIX_TIMEOUT` in whole seconds, rounded up (PMIx takes an `int`; 0 would mean never).
    fn timeout(timeout: Duration) -> Self {
        let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        let seconds = c_int::try_from(seconds.max(1)).unwrap_or(c_int::MAX);
        Self::new(
            KEY_TIMEOUT,
            Value {
                type_: data_type::INT,
                data: ValueData { integer: seconds },
            },
        )
    }

    fn flag(key: &CStr, on: bool) -> Self {
        Self::new(
            key,
            Value {
                type_: data_type::BOOL,
                data: ValueData { flag: on },
            },
        )
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> Status;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> Status;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> Status;
type CommitFn = unsafe extern "C" fn() -> Status;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> Status;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> Status;
type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;
type ValueDestructFn = unsafe extern "C" fn(*mut Value);

/// The functions of the opened library.
struct Api {
    init: Symbol<InitFn>,
    finalize: Symbol<FinalizeFn>,
    put: Symbol<PutFn>,
    commit: Symbol<CommitFn>,
    fence: Symbol<FenceFn>,
    get: Symbol<GetFn>,
    error_string: Symbol<ErrorStringFn>,
    /// `PMIx_Value_destruct` (PMIx 4.2 and later); before it the header's macro freed what a
    /// value owns, which [`Api::release`] then does itself.
    value_destruct: Option<Symbol<ValueDestructFn>>,
    /// Kept open for the life of the process (the symbols point into it).
    _library: Library,
}

impl Api {
    fn load() -> Result<Api, String> {
        // RTLD_GLOBAL: libpmix loads plugins of its own (pmix_mca_*.so) that take its symbols
        // from the global scope.
        // SAFETY: opening libpmix runs its initialisers, which only set up its own state.
        let library = unsafe { Library::open(Some(LIBRARY), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| e.to_string())?;
        /// Looks a function up by name; the caller states its C type.
        fn symbol<T>(library: &Library, name: &str) -> Result<Symbol<T>, String> {
            // SAFETY: every `T` this is called with is the C signature `pmix.h` declares for
            // `name` (see the type aliases above).
            unsafe { library.get::<T>(name.as_bytes()) }
                .map_err(|e| format!("{LIBRARY} has no {name}: {e} (not a PMIx client library?)"))
        }
        Ok(Api {
            init: symbol(&library, "PMIx_Init")?,
            finalize: symbol(&library, "PMIx_Finalize")?,
            put: symbol(&library, "PMIx_Put")?,
            commit: symbol(&library, "PMIx_Commit")?,
            fence: symbol(&library, "PMIx_Fence")?,
            get: symbol(&library, "PMIx_Get")?,
            error_string: symbol(&library, "PMIx_Error_string")?,
            value_destruct: symbol(&library, "PMIx_Value_destruct").ok(),
            _library: library,
        })
    }

    /// `PMIx_Error_string`, e.g. "UNREACHABLE" or "PMIX_ERR_TIMEOUT".
    fn describe(&self, status: Status) -> String {
        // SAFETY: PMIx_Error_string takes any status and returns a static string or NULL.
        let text = unsafe { (self.error_string)(status) };
        if text.is_null() {
            return format!("status {status}");
        }
        // SAFETY: a NUL-terminated static string from the library.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{text} ({status})")
    }

    fn check(&self, call: &'static str, status: Status) -> Result<(), Error> {
        if status == SUCCESS {
            Ok(())
        } else {
            Err(Error::Call {
                call,
                status,
                text: self.describe(status),
            })
        }
    }

    /// Frees a value `PMIx_Get` returned: `PMIX_VALUE_RELEASE`.
    ///
    /// # Safety
    ///
    /// `value` is a value `PMIx_Get` returned, released once.
    unsafe fn release(&self, value: *mut Value) {
        if value.is_null() {
            return;
        }
        match &self.value_destruct {
            // SAFETY: the caller's promise: a value of the library's, destructed once.
            Some(destruct) => unsafe { destruct(value) },
            None => {
                // What PMIx 3's PMIX_VALUE_DESTRUCT did for the types read here: free the
                // memory the value owns (allocated with malloc by the library).
                // SAFETY: a valid value of the library's; its type says which member is set.
                unsafe {
                    match (*value).type_ {
                        data_type::STRING => libc::free((*value).data.string.cast()),
                        data_type::BYTE_OBJECT => libc::free((*value).data.bo.bytes.cast()),
                        _ => {}
                    }
                }
            }
        }
        // SAFETY: PMIx_Get allocates the value itself with malloc; freed once, here.
        unsafe { libc::free(value.cast()) };
    }
}

/// The library, opened once per process (or the reason it could not be).
fn api() -> Result<&'static Api, Error> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(Api::load)
        .as_ref()
        .map_err(|reason| Error::Load {
            reason: reason.clone(),
        })
}

// ---------------------------------------------------------------------------------------------
// The safe API

/// What went wrong in a PMIx call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `libpmix.so.2` is not installed, or is not a PMIx client library.
    #[error("cannot load the PMIx client library {LIBRARY}: {reason}")]
    Load { reason: String },
    /// A PMIx call returned an error status.
    #[error("{call} failed: {text}")]
    Call {
        call: &'static str,
        status: i32,
        /// `PMIx_Error_string` of the status, with the number.
        text: String,
    },
    /// A value is not what it should be (a type, a length, a NUL byte).
    #[error("{0}")]
    Value(String),
}

impl Error {
    /// True for [`Error::Call`] with `PMIX_ERR_TIMEOUT`.
    pub fn is_timeout(&self) -> bool {
        /// `PMIX_ERR_TIMEOUT`.
        const ERR_TIMEOUT: Status = -24;
        matches!(self, Error::Call { status, .. } if *status == ERR_TIMEOUT)
    }
}

/// This process as a PMIx client: initialised with [`Client::init`], finalised by
/// [`Client::finalize`] or when dropped (a launcher such as Open MPI's `mpirun` reports a
/// process that initialised PMIx and exited without finalising as failed).
pub struct Client {
    api: &'static Api,
    me: Proc,
    namespace: String,
    finalized: bool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.namespace)
            .field("rank", &self.me.rank)
            .finish()
    }
}

impl Client {
    /// Loads the library (the first time) and connects to the launcher's PMIx server
    /// (`PMIx_Init`), which names this process: its namespace (the job) and its rank.
    pub fn init() -> Result<Client, Error> {
        let api = api()?;
        let mut me = Proc {
            nspace: [0; MAX_NSLEN + 1],
            rank: u32::MAX,
        };
        // SAFETY: `me` is a pmix_proc_t PMIx_Init fills in; no attributes.
        let status = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        api.check("PMIx_Init", status)?;
        // The namespace is NUL-terminated within its array (PMIX_LOAD_NSPACE leaves the last
        // byte 0); the last byte is forced to 0 in case a library does not.
        me.nspace[MAX_NSLEN] = 0;
        // SAFETY: NUL-terminated within the array (above).
        let namespace = unsafe { CStr::from_ptr(me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Client {
            api,
            me,
            namespace,
            finalized: false,
        })
    }

    /// The job's namespace, e.g. `"1062666241"` under Open MPI 4's `mpirun`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// This process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The number of processes in the job (`PMIX_JOB_SIZE`, job-level data the launcher
    /// provides before the processes start).
    pub fn job_size(&self, timeout: Duration) -> Result<u32, Error> {
        let job = Proc {
            rank: RANK_WILDCARD,
            ..self.me
        };
        self.get_value(&job, KEY_JOB_SIZE, timeout, |value| {
            let number = integer_of(value);
            number.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                Error::Value(format!(
                    "PMIx_Get(pmix.job.size) gave a value of type {} that is not a job size",
                    value.type_
                ))
            })
        })
    }

    /// Publishes `value` under `key` for every process of the job (`PMIx_Put`, global scope);
    /// it reaches the others after [`Client::commit`] and a [`Client::fence`].
    pub fn put(&self, key: &str, value: &str) -> Result<(), Error> {
        let key = c_key(key)?;
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::Value(format!(
                "a value of {} bytes for {key:?} is over the {MAX_VALUE_LEN}-byte limit",
                value.len()
            )));
        }
        let text = CString::new(value)
            .map_err(|_| Error::Value(format!("the value for {key:?} holds a NUL byte")))?;
        let mut value = Value {
            type_: data_type::STRING,
            data: ValueData {
                string: text.as_ptr().cast_mut(),
            },
        };
        // SAFETY: a NUL-terminated key and a string value that outlive the call; PMIx_Put
        // copies both (it never writes through the string).
        let status = unsafe { (self.api.put)(SCOPE_GLOBAL, key.as_ptr(), &mut value) };
        self.api.check("PMIx_Put", status)
    }

    /// Hands what [`Client::put`] published to the local PMIx server (`PMIx_Commit`).
    pub fn commit(&self) -> Result<(), Error> {
        // SAFETY: no arguments.
        let status = unsafe { (self.api.commit)() };
        self.api.check("PMIx_Commit", status)
    }

    /// Waits until every process of the job has called this too, and collects what each one
    /// committed, so that [`Client::get`] finds it (`PMIx_Fence` over the whole namespace with
    /// `PMIX_COLLECT_DATA`). Gives up with an error after `timeout` (`PMIX_TIMEOUT`, which
    /// the launcher's PMIx server enforces).
    pub fn fence(&self, timeout: Duration) -> Result<(), Error> {
        let everyone = Proc {
            rank: RANK_WILDCARD,
            ..self.me
        };
        let info = [Info::flag(KEY_COLLECT_DATA, true), Info::timeout(timeout)];
        // SAFETY: one pmix_proc_t and two pmix_info_t, alive for the call, which only reads
        // them.
        let status = unsafe { (self.api.fence)(&everyone, 1, info.as_ptr(), info.len()) };
        self.api.check("PMIx_Fence", status)
    }

    /// The string process `rank` of the job published under `key` (`PMIx_Get`).
    pub fn get(&self, rank: u32, key: &str, timeout: Duration) -> Result<String, Error> {
        let key = c_key(key)?;
        let from = Proc { rank, ..self.me };
        self.get_value(&from, &key, timeout, |value| {
            if value.type_ != data_type::STRING {
                return Err(Error::Value(format!(
                    "rank {rank}'s {key:?} is of PMIx type {}, not a string",
                    value.type_
                )));
            }
            // SAFETY: the type says the string member is set.
            let text = unsafe { value.data.string };
            if text.is_null() {
                return Err(Error::Value(format!(
                    "rank {rank}'s {key:?} is a NULL string"
                )));
            }
            // SAFETY: a NUL-terminated string owned by the value, read before it is released.
            let bytes = unsafe { CStr::from_ptr(text) }.to_bytes();
            if bytes.len() > MAX_VALUE_LEN {
                return Err(Error::Value(format!(
                    "rank {rank}'s {key:?} is {} bytes long, over the {MAX_VALUE_LEN}-byte \
                     limit",
                    bytes.len()
                )));
            }
            String::from_utf8(bytes.to_vec())
                .map_err(|_| Error::Value(format!("rank {rank}'s {key:?} is not UTF-8")))
        })
    }

    /// `PMIx_Get` of `key` from `from`, the value read by `read` and then released.
    fn get_value<T>(
        &self,
        from: &Proc,
        key: &CStr,
        timeout: Duration,
        read: impl FnOnce(&Value) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let info = [Info::timeout(timeout)];
        let mut value: *mut Value = std::ptr::null_mut();
        // SAFETY: a pmix_proc_t, a NUL-terminated key and one pmix_info_t alive for the call;
        // `value` receives a value the library allocated (or stays NULL).
        let status =
            unsafe { (self.api.get)(from, key.as_ptr(), info.as_ptr(), info.len(), &mut value) };
        if status != SUCCESS {
            // SAFETY: whatever the library may have handed back on failure, released once.
            unsafe { self.api.release(value) };
            return Err(Error::Call {
                call: "PMIx_Get",
                status,
                text: format!(
                    "{} (key {key:?}, rank {})",
                    self.api.describe(status),
                    from.rank
                ),
            });
        }
        if value.is_null() {
            return Err(Error::Value(format!(
                "PMIx_Get({key:?}) succeeded without a value"
            )));
        }
        // SAFETY: a valid value from the library, read before it is released.
        let result = read(unsafe { &*value });
        // SAFETY: the value PMIx_Get returned, released once.
        unsafe { self.api.release(value) };
        result
    }

    /// Disconnects from the PMIx server (`PMIx_Finalize`).
    pub fn finalize(mut self) -> Result<(), Error> {
        self.finalize_once()
    }

    fn finalize_once(&mut self) -> Result<(), Error> {
        if std::mem::replace(&mut self.finalized, true) {
            return Ok(());
        }
        // SAFETY: no attributes; called once per successful PMIx_Init.
        let status = unsafe { (self.api.finalize)(std::ptr::null(), 0) };
        self.api.check("PMIx_Finalize", status)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.finalize_once();
    }
}

/// The value as a number, if it is one of the integer types a job size may come as.
fn integer_of(value: &Value) -> Option<u64> {
    // SAFETY: each arm reads the member its type code says is set.
    unsafe {
        match value.type_ {
            data_type::UINT32 => Some(u64::from(value.data.uint32)),
            data_type::UINT => Some(u64::from(value.data.uint)),
            data_type::UINT64 => Some(value.data.uint64),
            data_type::SIZE => Some(value.data.size as u64),
            data_type::INT => u64::try_from(value.data.integer).ok(),
            data_type::INT32 => u64::try_from(value.data.int32).ok(),
            _ => None,
        }
    }
}

fn c_key(key: &str) -> Result<CString, Error> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::Value(format!(
            "the key {key:?} is longer than PMIx's {MAX_KEY_LEN} bytes"
        )));
    }
    CString::new(key).map_err(|_| Error::Value(format!("the key {key:?} holds a NUL byte")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The layouts PMIx 4.2's headers give (checked with the C compiler on x86_64 and
    /// aarch64: the same on every LP64 target), which PMIx 3 shares.
    #[test]
    fn the_declared_types_have_the_c_layout() {
        assert_eq!(size_of::<Proc>(), 260);
        assert_eq!(offset_of!(Proc, rank), 256);
        assert_eq!(size_of::<Value>(), 32);
        assert_eq!(offset_of!(Value, data), 8);
        assert_eq!(size_of::<Info>(), 552);
        assert_eq!(offset_of!(Info, flags), 512);
        assert_eq!(offset_of!(Info, value), 520);
    }

    #[test]
    fn timeouts_are_whole_seconds_rounded_up() {
        // SAFETY: reading the integer member the constructor set.
        let seconds = |d| unsafe { Info::timeout(d).value.data.integer };
        assert_eq!(seconds(Duration::from_secs(60)), 60);
        assert_eq!(seconds(Duration::from_millis(1500)), 2);
        assert_eq!(seconds(Duration::ZERO), 1, "0 would mean no timeout at all");
        assert_eq!(seconds(Duration::from_secs(u64::MAX)), c_int::MAX);
    }

    #[test]
    fn keys_are_bounded_and_nul_free() {
        assert!(c_key("nicmsg.host.v1").is_ok());
        assert!(c_key("a\0b").is_err());
        assert!(c_key(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        let info = Info::flag(KEY_COLLECT_DATA, true);
        // SAFETY: NUL-terminated: the key is shorter than the array, which starts zeroed.
        let key = unsafe { CStr::from_ptr(info.key.as_ptr()) };
        assert_eq!(key, KEY_COLLECT_DATA);
    }

    /// Without a launcher's PMIx server, initialising fails with an error and returns; it does
    /// not hang. Where the library is not installed, the error says so.
    #[test]
    fn init_without_a_server_fails_cleanly() {
        if std::env::var_os("PMIX_NAMESPACE").is_some() {
            eprintln!("skipped: this test runs under a PMIx launcher");
            return;
        }
        match Client::init() {
            Ok(client) => panic!("PMIx_Init succeeded without a server: {client:?}"),
            Err(Error::Load { reason }) => eprintln!("no PMIx here: {reason}"),
            Err(error @ Error::Call { .. }) => eprintln!("refused as expected: {error}"),
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
}
