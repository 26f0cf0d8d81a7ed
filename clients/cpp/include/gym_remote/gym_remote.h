/* gym_remote.h: the C interface of the gym_remote client (libgym_remote.so), plain C99.
 *
 * It puts envs written in any language that can call C (C, C#, Rust, a game engine's scripting) behind
 * a Python gym_remote RemoteVectorEnv, speaking docs/PROTOCOL.md (version 2). The client is driven
 * from the host's own thread: gr_client_start() returns at once, and each gr_client_pump() does the
 * protocol work that is ready and calls the env callbacks on the calling thread, as a game's main
 * loop needs.
 *
 * Stability. Handles are opaque (gr_value, gr_space, gr_options, gr_client, gr_error,
 * gr_step_result); the numbers below (status codes, states, value kinds, option ids) never change
 * meaning and new ones are only added; gr_env_callbacks begins with its own size, so later versions
 * may append fields. Integers have fixed widths. gr_abi_version() says which version the library is.
 *
 * Errors. Functions return a gr_status (GR_OK = 0) or a handle (NULL on failure); after any failure
 * gr_last_error() holds the text of what was wrong, for the calling thread. No C++ exception crosses
 * this interface.
 *
 * Memory. Every gr_value*, gr_space*, gr_options* and gr_client* a function returns is the caller's,
 * freed with its _free function (free(NULL) is allowed). Functions that put a value into another
 * (gr_list_append, gr_dict_set, ...) copy it: the caller still owns and frees its own. Pointers
 * documented as "borrowed" (items of a container, string and array data, handles given to callbacks)
 * belong to their owner and stay valid until it changes or is freed; never free them.
 *
 * Threads. A client and the values given to its callbacks are used from one thread at a time; only
 * gr_client_request_stop() may be called from another thread or a signal handler.
 */
#ifndef GYM_REMOTE_H_
#define GYM_REMOTE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define GR_API __declspec(dllexport)
#else
#define GR_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------------------------------ */

/* The ABI version this header describes: (major << 16) | (minor << 8) | patch. A library whose major
 * differs from the header's is not compatible; a larger minor only adds. */
#define GR_ABI_VERSION ((1u << 16) | (1u << 8) | 0u)
/* The ABI version of the library loaded, to compare with GR_ABI_VERSION. */
GR_API uint32_t gr_abi_version(void);
/* The protocol version the client speaks (2). */
GR_API uint32_t gr_protocol_version(void);

/* ---- status codes ------------------------------------------------------------------------------- */

typedef int32_t gr_status;
#define GR_OK 0
#define GR_INVALID_ARGUMENT 1 /* the caller's mistake: a bad option, key file, handle or value */
#define GR_PROTOCOL_ERROR 2   /* a malformed message or value */
#define GR_ENV_ERROR 3        /* an env callback failed ("raised"): its gr_error names the exception */
#define GR_ENCODE_ERROR 4     /* a value that cannot travel without pickle */
#define GR_REFUSED 5          /* the server refused the client for good */
#define GR_UNAUTHORIZED 6     /* the server does not accept this client's key (ZAP status 400) */
#define GR_HANDSHAKE_FAILED 7 /* the security handshake keeps failing (wrong server key or secret) */
#define GR_TIMEOUT 8          /* no server answered in time, no slot freed up in time */
#define GR_LOST 9             /* the server went away and reconnecting is off (or gave up) */
#define GR_STOPPED 10         /* gr_client_request_stop() was called: the client said BYE and left */
#define GR_INTERNAL 11        /* a bug, or a resource failure (libzmq, memory) */
#define GR_PENDING 12         /* a step callback only: the result comes later (gr_client_complete_step) */

/* The text of the last failure of a gr_ function on this thread ("" if none). Borrowed: valid until
 * the next failing call on this thread. */
GR_API const char* gr_last_error(void);
/* When the last failure was GR_ENV_ERROR (e.g. gr_to_int64 of a str), the Python exception it stands
 * for: its type ("TypeError") and module ("builtins"); else "". Borrowed, as gr_last_error. */
GR_API const char* gr_last_error_type(void);
GR_API const char* gr_last_error_module(void);

/* Log lines on stderr at this level and above: 0 debug, 1 info, 2 warning (the default), 3 error. */
GR_API gr_status gr_set_log_level(int32_t level);
/* Sends the log lines to `sink(user, level, message)` instead of stderr (e.g. a game engine's console;
 * level as gr_set_log_level's, message UTF-8 without a newline, borrowed for the call). It may be
 * called from any thread that logs, one call at a time. NULL: stderr again. */
typedef void (*gr_log_sink)(void* user, int32_t level, const char* message);
GR_API void gr_set_log_sink(gr_log_sink sink, void* user);

/* ---- values (PROTOCOL.md §3) -------------------------------------------------------------------- */

typedef struct gr_value gr_value;

/* What a value is: one kind per JSON tag of the protocol (and the plain JSON types). */
typedef int32_t gr_kind;
#define GR_NONE 0          /* None */
#define GR_BOOL 1          /* bool */
#define GR_INT 2           /* int in the signed 64-bit range */
#define GR_BIG_INT 3       /* int outside it (tag "i"): gr_as_uint64 up to 2**64-1, else gr_big_int_hex */
#define GR_FLOAT 4         /* float (any double) */
#define GR_STR 5           /* str, UTF-8 */
#define GR_BYTES 6         /* bytes (tag "b") */
#define GR_LIST 7          /* list (tag "l") */
#define GR_TUPLE 8         /* tuple (tag "t") */
#define GR_DICT 9          /* dict with str keys, in insertion order */
#define GR_PAIR_DICT 10    /* dict whose keys are not all str (tag "d"): (key, value) pairs */
#define GR_ARRAY 11        /* numpy array (tag "a"): dtype, shape, little-endian C-order data */
#define GR_SCALAR 12       /* numpy scalar (tags "s", "S"): a dtype and one element */
#define GR_OBJECT_ARRAY 13 /* numpy array of dtype object (tag "o"): shape and items */
#define GR_GRAPH 14        /* gymnasium.spaces.GraphInstance (tag "g"): 3 items, nodes, edges, edge_links */

/* Dtypes are numpy's strings: "|b1" "|i1" "<i2" "<i4" "<i8" "|u1" "<u2" "<u4" "<u8" "<f4" "<f8", or the
 * names numpy takes for them ("float32", "uint8", "bool", "f", ...). Others are refused. */

GR_API gr_value* gr_none(void);
GR_API gr_value* gr_bool(int32_t value);
GR_API gr_value* gr_int(int64_t value);
GR_API gr_value* gr_uint(uint64_t value); /* GR_INT, or GR_BIG_INT above 2**63-1 */
/* An int of any size from text: "-?[0-9a-f]+" (hex) or "-?[0-9]+" (decimal). NULL if malformed. */
GR_API gr_value* gr_big_int_hex(const char* hex);
GR_API gr_value* gr_big_int_decimal(const char* decimal);
GR_API gr_value* gr_float(double value);
/* A str from `size` bytes of UTF-8 (NULL if they are not UTF-8); gr_str0 from a NUL-terminated one. */
GR_API gr_value* gr_str(const char* utf8, size_t size);
GR_API gr_value* gr_str0(const char* utf8);
GR_API gr_value* gr_bytes(const void* data, size_t size);
GR_API gr_value* gr_list(void);
GR_API gr_value* gr_tuple(void);
GR_API gr_value* gr_dict(void);
GR_API gr_value* gr_pair_dict(void);
/* A numpy array of `dtype` and `shape` (ndim dimensions, at most 32), its data copied from `data`
 * (prod(shape) * itemsize bytes, little-endian, C order; NULL allowed when that is 0). */
GR_API gr_value* gr_array(const char* dtype, const int64_t* shape, size_t ndim, const void* data);
/* An array of zeros, to be filled in place through gr_array_mutable_data (no copy of the host's data):
 * the array's own bytes, borrowed, *size set; NULL for an empty array. */
GR_API gr_value* gr_array_zeros(const char* dtype, const int64_t* shape, size_t ndim);
GR_API void* gr_array_mutable_data(gr_value* array, size_t* size);
/* Numpy scalars: an integer dtype from int64 or uint64 (wrapping as numpy's casts do), a float dtype
 * from a double, np.bool_. */
GR_API gr_value* gr_scalar_int(const char* dtype, int64_t value);
GR_API gr_value* gr_scalar_uint(const char* dtype, uint64_t value);
GR_API gr_value* gr_scalar_float(const char* dtype, double value);
GR_API gr_value* gr_scalar_bool(int32_t value);
/* An object array of `shape` whose items (prod(shape), C order) are the items of `items` (a list). */
GR_API gr_value* gr_object_array(const int64_t* shape, size_t ndim, const gr_value* items);
/* A GraphInstance; edges and edge_links may be None. */
GR_API gr_value* gr_graph(const gr_value* nodes, const gr_value* edges, const gr_value* edge_links);

GR_API gr_value* gr_value_copy(const gr_value* value);
GR_API void gr_value_free(gr_value* value);
/* Makes `target` a copy of `source` (e.g. to fill a callback's output value). */
GR_API gr_status gr_value_set(gr_value* target, const gr_value* source);
/* Moves `source` into `target` and frees `source` (no copy). */
GR_API gr_status gr_value_take(gr_value* target, gr_value* source);

/* Containers. gr_list_append: a list or tuple. gr_dict_set: a GR_DICT (replaces the value of an
 * existing key in place). gr_pair_dict_add: any dict (keys as given, hashable; no merging of equal
 * keys); a pair dict whose keys are all str (an empty one too) is a GR_DICT. */
GR_API gr_status gr_list_append(gr_value* sequence, const gr_value* item);
GR_API gr_status gr_dict_set(gr_value* dict, const char* key, const gr_value* item);
/* The same, moving `item` in instead of copying it: its handle is freed, whatever the outcome. */
GR_API gr_status gr_list_append_take(gr_value* sequence, gr_value* item);
GR_API gr_status gr_dict_set_take(gr_value* dict, const char* key, gr_value* item);
GR_API gr_status gr_pair_dict_add(gr_value* dict, const gr_value* key, const gr_value* item);

/* Reading. gr_kind_of: the kind (GR_NONE for a NULL value). gr_len: items of a list, tuple, object
 * array or graph (3), entries of a dict or pair dict, elements of an array, bytes of a str or bytes. */
GR_API gr_kind gr_kind_of(const gr_value* value);
GR_API size_t gr_len(const gr_value* value);
GR_API gr_status gr_as_bool(const gr_value* value, int32_t* out);   /* GR_BOOL */
GR_API gr_status gr_as_int64(const gr_value* value, int64_t* out);  /* GR_INT */
GR_API gr_status gr_as_uint64(const gr_value* value, uint64_t* out); /* GR_INT >= 0, GR_BIG_INT < 2**64 */
GR_API gr_status gr_as_double(const gr_value* value, double* out);  /* GR_FLOAT */
/* Borrowed text: a GR_BIG_INT's hex digits ("-1f..."), NUL-terminated. */
GR_API const char* gr_big_int_hex_of(const gr_value* value);
/* Borrowed bytes of a str (UTF-8) or bytes, *size set; NUL-terminated too (a str may hold NULs). */
GR_API const char* gr_str_data(const gr_value* value, size_t* size);
/* Borrowed item `index` of a list, tuple, object array or graph; NULL (and gr_last_error) if none. */
GR_API const gr_value* gr_item(const gr_value* value, size_t index);
/* Entry `index` of a dict (key: borrowed NUL-terminated UTF-8) or pair dict (key: gr_pair_key). */
GR_API const char* gr_dict_key(const gr_value* value, size_t index);
/* The same key of a dict with its size in bytes (*size set), for keys that hold NUL characters (since 1.1). */
GR_API const char* gr_dict_key_data(const gr_value* value, size_t index, size_t* size);
GR_API const gr_value* gr_dict_value(const gr_value* value, size_t index);
GR_API const gr_value* gr_pair_key(const gr_value* value, size_t index);
/* The value of str key `key` in a dict (or a pair dict's str keys), borrowed; NULL if absent. */
GR_API const gr_value* gr_dict_find(const gr_value* value, const char* key);
/* Arrays and numpy scalars: the dtype string ("<f4", borrowed), the shape (borrowed, *ndim set; a
 * scalar has ndim 0), and the data: borrowed (*size bytes) or copied into `out` (capacity bytes at
 * least gr_array_nbytes). Object arrays have a shape and no data. */
GR_API const char* gr_array_dtype(const gr_value* value);
GR_API const int64_t* gr_array_shape(const gr_value* value, size_t* ndim);
GR_API const void* gr_array_data(const gr_value* value, size_t* size);
GR_API size_t gr_array_nbytes(const gr_value* value);
GR_API gr_status gr_array_copy(const gr_value* value, void* out, size_t capacity);
/* One number as Python's int() / float() take it (bool, int, float, a numpy scalar, a 1-element
 * array), and all the numbers of an array, scalar or (nested) lists of numbers, in C order (*count
 * set to how many there are; at most `capacity` written). */
GR_API gr_status gr_to_int64(const gr_value* value, int64_t* out);
GR_API gr_status gr_to_double(const gr_value* value, double* out);
GR_API gr_status gr_to_doubles(const gr_value* value, double* out, size_t capacity, size_t* count);
GR_API gr_status gr_to_int64s(const gr_value* value, int64_t* out, size_t capacity, size_t* count);
/* Structural equality (floats by bits: NaN equals NaN): 1 or 0. */
GR_API int32_t gr_value_equal(const gr_value* a, const gr_value* b);
/* Python's repr() of the value, NUL-terminated, malloc'd: free it with gr_string_free. */
GR_API char* gr_value_repr(const gr_value* value);
GR_API void gr_string_free(char* text);

/* ---- spaces (PROTOCOL.md §7.2) ------------------------------------------------------------------ */

typedef struct gr_space gr_space;

/* Box with the same bounds for every element (infinite bounds for float dtypes), or per element of a
 * 1-D box (n elements). */
GR_API gr_space* gr_space_box(double low, double high, const int64_t* shape, size_t ndim, const char* dtype);
GR_API gr_space* gr_space_box_bounds(const double* low, const double* high, size_t n, const char* dtype);
GR_API gr_space* gr_space_discrete(int64_t n, int64_t start, const char* dtype);
/* start may be NULL (all 0). */
GR_API gr_space* gr_space_multi_discrete(const int64_t* nvec, const int64_t* start, size_t n, const char* dtype);
GR_API gr_space* gr_space_multi_binary(const int64_t* shape, size_t ndim);
/* An empty Dict or Tuple, filled with gr_space_dict_add (keys in order) and gr_space_tuple_add (each
 * copies `child`). */
GR_API gr_space* gr_space_dict(void);
GR_API gr_space* gr_space_tuple(void);
GR_API gr_status gr_space_dict_add(gr_space* dict, const char* key, const gr_space* child);
GR_API gr_status gr_space_tuple_add(gr_space* tuple, const gr_space* child);
/* The space's description as the protocol carries it (a dict value), the caller's. */
GR_API gr_value* gr_space_describe(const gr_space* space);
GR_API void gr_space_free(gr_space* space);

/* ---- options ------------------------------------------------------------------------------------ */

typedef struct gr_options gr_options;

/* Defaults as `gym-remote client`: connect timeout 120 s, slot timeout 3600 s, reconnect timeout
 * 300 s, liveness timeout 10 s, wait for a slot, reconnect, data plane unless GYM_REMOTE_DATA_PLANE
 * says off, no spin, no security. */
GR_API gr_options* gr_options_new(void);
GR_API void gr_options_free(gr_options* options);
/* "tcp://HOST:PORT" or "ipc://PATH" (checked here). */
GR_API gr_status gr_options_set_endpoint(gr_options* options, const char* endpoint);
/* For logs and the server's client table (default: host:pid). */
GR_API gr_status gr_options_set_name(gr_options* options, const char* name);
/* Durations in seconds; <= 0 or infinite means forever (not for the liveness timeout). */
#define GR_CONNECT_TIMEOUT 0   /* wait this long for the server's answer to the first HELLO */
#define GR_SLOT_TIMEOUT 1      /* wait in line at most this long */
#define GR_RECONNECT_TIMEOUT 2 /* try to rejoin a server that went away for this long */
#define GR_LIVENESS_TIMEOUT 3  /* silence after which the server counts as gone (finite, > 0) */
#define GR_SPIN 4              /* over the data plane, busy-check this long for the next command (0: never) */
GR_API gr_status gr_options_set_seconds(gr_options* options, int32_t which, double seconds);
#define GR_WAIT_FOR_SLOT 0 /* no free slot: wait in line (1) or fail (0) */
#define GR_RECONNECT 1     /* rejoin a server that went away (1) or fail (0) */
#define GR_DATA_PLANE 2    /* the same-host data plane (PROTOCOL.md §13) on (1) or off (0) */
GR_API gr_status gr_options_set_flag(gr_options* options, int32_t which, int32_t on);
/* CURVE security (PROTOCOL.md §12): server_key (the server's NAME.key file, or its public key as 40
 * characters of Z85) and client_key (this client's NAME.key_secret file, or a secret key in Z85); or
 * a shared secret (its text) instead; NULL or "" for what is not given. All NULL: a plain connection. */
GR_API gr_status gr_options_set_security(gr_options* options, const char* server_key, const char* client_key,
                                         const char* secret);
/* The shared secret read from a file (surrounding whitespace stripped), as --secret-file. */
GR_API gr_status gr_options_set_secret_file(gr_options* options, const char* path);

/* ---- envs --------------------------------------------------------------------------------------- */

/* An env callback's error: the Python exception the learner raises (a RemoteEnvError naming the slot,
 * also of that class when it is a built-in or Gymnasium one). Borrowed, given to callbacks. */
typedef struct gr_error gr_error;
/* type: e.g. "ValueError"; module: e.g. "builtins" (NULL: "builtins"); message: UTF-8. */
GR_API gr_status gr_error_set(gr_error* error, const char* type, const char* module, const char* message);

/* What a step callback fills (borrowed, given to it): Gymnasium's 5-tuple. observation and info are
 * copied; info NULL means an empty dict. */
typedef struct gr_step_result gr_step_result;
GR_API gr_status gr_step_result_set(gr_step_result* result, const gr_value* observation, double reward,
                                    int32_t terminated, int32_t truncated, const gr_value* info);
/* The same, moving observation and info in (no copy): their handles are freed, whatever the outcome. */
GR_API gr_status gr_step_result_take(gr_step_result* result, gr_value* observation, double reward,
                                     int32_t terminated, int32_t truncated, gr_value* info);

/* The callbacks of the envs one client hosts; `env` is the env's index among them (0 .. num_envs-1).
 * Each returns GR_OK, or GR_ENV_ERROR with `error` set (step may also return GR_PENDING). Handles
 * given to a callback are borrowed and valid during the call only. A NULL callback keeps its default. */
typedef struct gr_env_callbacks {
  /* sizeof(gr_env_callbacks) as the caller compiled it: later versions may append fields. */
  uint32_t struct_size;
  /* The env's class name, for error messages ("'ProbeEnv' object has no attribute 'foo'"); NULL: "Env". */
  const char* class_name;
  /* env.metadata (a dict value; NULL: {}) and env.render_mode (NULL: None); copied at gr_client_new. */
  const gr_value* metadata;
  const char* render_mode;
  /* env.reset(seed=..., options=...). has_seed: 0 for seed=None, 1 for a seed below 2**64 (in `seed`),
   * 2 for a larger one (only in seed_value). seed_value: None or the int, whatever its size.
   * options: NULL when the learner left the keyword out, else the value (possibly None). Fill
   * `observation` and `info` (a dict; left as it is: {}) with gr_value_set or gr_value_take. */
  gr_status (*reset)(void* user, size_t env, int32_t has_seed, uint64_t seed, const gr_value* seed_value,
                     const gr_value* options, gr_value* observation, gr_value* info, gr_error* error);
  /* env.step(action): fill `result`. Or return GR_PENDING and give the result later with
   * gr_client_complete_step (or gr_client_fail_step): the client answers nothing meanwhile, so the
   * result must come within the learner's step timeout. A STEP for several envs calls them in turn:
   * the next env's step comes at the pump after the pending one was completed. */
  gr_status (*step)(void* user, size_t env, const gr_value* action, gr_step_result* result, gr_error* error);
  /* env.render(): fill `frame` (left as it is: None). */
  gr_status (*render)(void* user, size_t env, gr_value* frame, gr_error* error);
  /* Attributes for the learner's get_attr / call / set_attr beyond those the client answers itself
   * (render, np_random_seed, metadata, render_mode, spec, attributes stored by set_attr).
   * get_attr: return 1 with `value` set if the env has `name`, else 0. set_attr: return 1 if the env
   * took the value, 0 to let the client store it (a later get_attr returns it). */
  int32_t (*get_attr)(void* user, size_t env, const char* name, gr_value* value);
  int32_t (*set_attr)(void* user, size_t env, const char* name, const gr_value* value);
  /* Called once per env when the client ends. */
  void (*close)(void* user, size_t env);
} gr_env_callbacks;

/* ---- the client --------------------------------------------------------------------------------- */

typedef struct gr_client gr_client;

/* Where a client stands. */
typedef int32_t gr_state;
#define GR_STATE_NEW 0        /* created, not started */
#define GR_STATE_CONNECTING 1 /* saying HELLO, waiting for the WELCOME */
#define GR_STATE_IN_LINE 2    /* the server is full: waiting in line for a slot */
#define GR_STATE_MEMBER 3     /* serving slots */
#define GR_STATE_REJOINING 4  /* the server went away: joining again as a new session */
#define GR_STATE_CLOSED 5     /* ended: the server closed (GR_OK) or the client was stopped (GR_STOPPED) */
#define GR_STATE_REFUSED 6    /* ended: the server refused the client */
#define GR_STATE_FAILED 7     /* ended: another failure (gr_client_error says what) */

/* A client for num_envs envs (1 .. 65535) sharing the spaces (copied) and the callbacks (copied;
 * `user` is handed to each). NULL on failure (gr_last_error). */
GR_API gr_client* gr_client_new(const gr_options* options, size_t num_envs, const gr_space* observation_space,
                                const gr_space* action_space, const gr_env_callbacks* callbacks, void* user);
/* Checks the options and opens the connection; returns at once. */
GR_API gr_status gr_client_start(gr_client* client);
/* Does the protocol work that is ready (connecting, handshake, commands, liveness, rejoining),
 * calling the callbacks on this thread; returns within about max_wait_seconds (0: only what is ready
 * now; while a step is pending, at once). Longer only when a reply finds the server's queue full (it
 * waits up to the liveness timeout for room, then counts the server as gone) and at the end, when a
 * last BYE is given up to 1 s to leave. GR_OK while the client goes on; once it ended, its final
 * status (GR_OK after the server closed) — see gr_client_state. */
GR_API gr_status gr_client_pump(gr_client* client, double max_wait_seconds);
/* Start, then pump until the end; the final status. */
GR_API gr_status gr_client_run(gr_client* client);
GR_API gr_state gr_client_state(const gr_client* client);
/* The text of the final status once the client ended, else "" (borrowed, valid while the client). */
GR_API const char* gr_client_error(const gr_client* client);
/* Asks the client to leave (BYE): the next pump ends it with GR_STOPPED. Safe from any thread and
 * from a signal handler. */
GR_API void gr_client_request_stop(gr_client* client);
/* The env whose step is pending (awaited), or -1. */
GR_API int64_t gr_client_pending_env(const gr_client* client);
/* The result of env `env`'s pending step (as gr_step_result_set takes it), or its error; the next
 * pump goes on with the command. */
GR_API gr_status gr_client_complete_step(gr_client* client, size_t env, const gr_value* observation, double reward,
                                         int32_t terminated, int32_t truncated, const gr_value* info);
GR_API gr_status gr_client_fail_step(gr_client* client, size_t env, const char* type, const char* module,
                                     const char* message);
/* The slots served (the vector's indexes of envs 0, 1, ...): copies at most `capacity`, returns how
 * many there are (0 before the first WELCOME). */
GR_API size_t gr_client_slots(const gr_client* client, int64_t* out, size_t capacity);
/* Ends a client still running as gr_client_request_stop does (BYE, envs closed), then frees it. */
GR_API void gr_client_free(gr_client* client);

#ifdef __cplusplus
}
#endif

#endif /* GYM_REMOTE_H_ */
