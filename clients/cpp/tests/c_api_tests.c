/* Tests of the C interface (gym_remote.h), compiled as C99: every kind of value built and read back
 * through the handles, arrays, seeds beyond 2**63, spaces, options, and errors with their text. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gym_remote/gym_remote.h"

static int g_failures = 0;

#define CHECK(condition)                                                              \
  do {                                                                                \
    if (!(condition)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, \
              #condition, gr_last_error());                                           \
      ++g_failures;                                                                   \
    }                                                                                 \
  } while (0)

/* `value`'s repr is `expected`; frees value. */
static void CheckRepr(gr_value* value, const char* expected) {
  char* text = gr_value_repr(value);
  if (text == NULL || strcmp(text, expected) != 0) {
    fprintf(stderr, "repr: expected %s, got %s\n", expected, text ? text : "(null)");
    ++g_failures;
  }
  gr_string_free(text);
  gr_value_free(value);
}

static void TestVersion(void) {
  CHECK(gr_abi_version() == GR_ABI_VERSION);
  CHECK((gr_abi_version() >> 16) == 1);
  CHECK(gr_protocol_version() == 2);
}

static void TestScalars(void) {
  int32_t flag = 0;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  gr_value* v = gr_none();
  CHECK(gr_kind_of(v) == GR_NONE);
  gr_value_free(v);
  v = gr_bool(1);
  CHECK(gr_kind_of(v) == GR_BOOL && gr_as_bool(v, &flag) == GR_OK && flag == 1);
  gr_value_free(v);
  v = gr_int(INT64_MIN);
  CHECK(gr_kind_of(v) == GR_INT && gr_as_int64(v, &i) == GR_OK && i == INT64_MIN);
  CHECK(gr_as_uint64(v, &u) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "not an int in [0, 2**64)"));
  gr_value_free(v);
  v = gr_float(-0.5);
  CHECK(gr_kind_of(v) == GR_FLOAT && gr_as_double(v, &d) == GR_OK && d == -0.5);
  CHECK(gr_as_int64(v, &i) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "got a float"));
  gr_value_free(v);
  v = gr_float(NAN);
  gr_value* w = gr_float(NAN);
  CHECK(gr_value_equal(v, w) == 1); /* by bits */
  gr_value_free(v);
  gr_value_free(w);
  v = gr_str("a\0b", 3);
  size_t size = 0;
  const char* text = gr_str_data(v, &size);
  CHECK(gr_kind_of(v) == GR_STR && size == 3 && memcmp(text, "a\0b", 3) == 0);
  gr_value_free(v);
  CHECK(gr_str("\xff", 1) == NULL && strstr(gr_last_error(), "not valid UTF-8"));
  const unsigned char raw[3] = {0, 255, 7};
  v = gr_bytes(raw, 3);
  text = gr_str_data(v, &size);
  CHECK(gr_kind_of(v) == GR_BYTES && size == 3 && memcmp(text, raw, 3) == 0);
  CheckRepr(v, "b'\\x00\\xff\\x07'");
}

static void TestBigInts(void) {
  uint64_t u = 0;
  int64_t i = 0;
  gr_value* v = gr_uint(UINT64_MAX); /* above 2**63: not lost */
  CHECK(gr_kind_of(v) == GR_BIG_INT && gr_as_uint64(v, &u) == GR_OK && u == UINT64_MAX);
  CHECK(strcmp(gr_big_int_hex_of(v), "ffffffffffffffff") == 0);
  CHECK(gr_as_int64(v, &i) == GR_INVALID_ARGUMENT);
  gr_value* w = gr_big_int_decimal("18446744073709551615");
  CHECK(gr_value_equal(v, w) == 1);
  gr_value_free(w);
  CheckRepr(v, "0xffffffffffffffff"); /* the C++ repr of a big int is hex */
  v = gr_uint((uint64_t)1 << 63);
  CHECK(gr_as_uint64(v, &u) == GR_OK && u == ((uint64_t)1 << 63));
  gr_value_free(v);
  v = gr_big_int_hex("-10000000000000000000000");
  CHECK(gr_kind_of(v) == GR_BIG_INT && gr_as_uint64(v, &u) == GR_INVALID_ARGUMENT);
  CheckRepr(v, "-0x10000000000000000000000");
  v = gr_big_int_hex("7f"); /* within int64: an ordinary int */
  CHECK(gr_kind_of(v) == GR_INT && gr_as_int64(v, &i) == GR_OK && i == 127);
  gr_value_free(v);
  CHECK(gr_big_int_hex("xyz") == NULL && strlen(gr_last_error()) > 0);
}

static void TestContainers(void) {
  gr_value* list = gr_list();
  gr_value* item = gr_int(1);
  CHECK(gr_list_append(list, item) == GR_OK);
  gr_value_free(item);
  item = gr_str0("x");
  CHECK(gr_list_append(list, item) == GR_OK);
  gr_value_free(item);
  CHECK(gr_len(list) == 2 && gr_kind_of(gr_item(list, 1)) == GR_STR);
  CHECK(gr_item(list, 2) == NULL && strstr(gr_last_error(), "out of range"));
  gr_value* tuple = gr_tuple();
  CHECK(gr_list_append(tuple, list) == GR_OK);
  gr_value* dict = gr_dict();
  CHECK(gr_dict_set(dict, "t", tuple) == GR_OK);
  item = gr_none();
  CHECK(gr_dict_set(dict, "n", item) == GR_OK);
  gr_value_free(item);
  CHECK(gr_len(dict) == 2 && strcmp(gr_dict_key(dict, 1), "n") == 0);
  CHECK(gr_kind_of(gr_dict_find(dict, "t")) == GR_TUPLE && gr_dict_find(dict, "zz") == NULL);
  {
    /* a str key holding a NUL: whole through gr_dict_key_data, cut at the NUL by gr_dict_key */
    gr_value* pairs = gr_pair_dict();
    gr_value* key = gr_str("a\0b", 3);
    CHECK(gr_pair_dict_add(pairs, key, key) == GR_OK && gr_kind_of(pairs) == GR_DICT);
    size_t size = 99;
    const char* data = gr_dict_key_data(pairs, 0, &size);
    CHECK(data != NULL && size == 3 && memcmp(data, "a\0b", 3) == 0 && strcmp(gr_dict_key(pairs, 0), "a") == 0);
    CHECK(gr_dict_key_data(pairs, 1, &size) == NULL && size == 0 && strstr(gr_last_error(), "out of range"));
    CHECK(gr_dict_key_data(pairs, 0, NULL) == NULL && gr_dict_key_data(list, 0, &size) == NULL);
    gr_value_free(key);
    gr_value_free(pairs);
  }
  CHECK(gr_list_append(dict, tuple) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "expected a list or tuple"));
  gr_value* copy = gr_value_copy(dict);
  CHECK(gr_value_equal(copy, dict) == 1);
  gr_value_free(copy);
  gr_value_free(list);
  gr_value_free(tuple);
  CheckRepr(dict, "{'t': ([1, 'x'],), 'n': None}");

  gr_value* pairs = gr_pair_dict();
  gr_value* key = gr_int(1);
  item = gr_float(2.5);
  CHECK(gr_pair_dict_add(pairs, key, item) == GR_OK);
  gr_value* unhashable = gr_list();
  CHECK(gr_pair_dict_add(pairs, unhashable, item) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "unhashable"));
  CHECK(gr_len(pairs) == 1 && gr_value_equal(gr_pair_key(pairs, 0), key) && gr_value_equal(gr_dict_value(pairs, 0), item));
  gr_value_free(unhashable);
  gr_value_free(key);
  gr_value_free(item);
  CheckRepr(pairs, "{1: 2.5}");

  /* the _take variants move the item in and free its handle, also when they fail */
  gr_value* moved = gr_list();
  CHECK(gr_list_append_take(moved, gr_str0("m")) == GR_OK && gr_len(moved) == 1);
  CHECK(gr_dict_set_take(moved, "k", gr_int(1)) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "gr_dict_set_take"));
  CHECK(gr_list_append_take(moved, NULL) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "the item is NULL"));
  CheckRepr(moved, "['m']");

  /* gr_value_take moves a value into an output slot */
  gr_value* slot = gr_none();
  CHECK(gr_value_take(slot, gr_int(5)) == GR_OK);
  int64_t five = 0;
  CHECK(gr_as_int64(slot, &five) == GR_OK && five == 5);
  gr_value_free(slot);
}

static void TestArrays(void) {
  const int64_t shape[2] = {2, 3};
  const float data[6] = {1.5f, -2.0f, 3.0f, 0.0f, INFINITY, -0.25f};
  gr_value* a = gr_array("float32", shape, 2, data);
  CHECK(gr_kind_of(a) == GR_ARRAY && strcmp(gr_array_dtype(a), "<f4") == 0 && gr_len(a) == 6);
  size_t ndim = 0, size = 0;
  const int64_t* dims = gr_array_shape(a, &ndim);
  CHECK(ndim == 2 && dims[0] == 2 && dims[1] == 3);
  const void* borrowed = gr_array_data(a, &size);
  CHECK(size == sizeof(data) && memcmp(borrowed, data, size) == 0);
  float copied[6];
  CHECK(gr_array_copy(a, copied, sizeof(copied)) == GR_OK && memcmp(copied, data, sizeof(data)) == 0);
  CHECK(gr_array_copy(a, copied, 4) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "24 bytes, room for 4"));
  double numbers[6];
  size_t count = 0;
  CHECK(gr_to_doubles(a, numbers, 6, &count) == GR_OK && count == 6 && numbers[5] == -0.25 && isinf(numbers[4]));
  gr_value_free(a);
  const char* dtypes[] = {"|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f4", "<f8"};
  const size_t sizes[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
  const unsigned char bytes[16] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  for (size_t k = 0; k < 11; ++k) {
    const int64_t n[1] = {2};
    gr_value* b = gr_array(dtypes[k], n, 1, bytes);
    CHECK(b != NULL && strcmp(gr_array_dtype(b), dtypes[k]) == 0 && gr_array_nbytes(b) == 2 * sizes[k]);
    gr_value* c = gr_value_copy(b);
    CHECK(gr_value_equal(b, c));
    gr_value_free(b);
    gr_value_free(c);
  }
  gr_value* zeros = gr_array_zeros("<i4", shape, 2);
  size_t room = 0;
  int32_t* cells = gr_array_mutable_data(zeros, &room);
  CHECK(cells != NULL && room == 24 && cells[5] == 0);
  cells[5] = -9; /* written in place: the value holds it */
  int32_t back[6];
  CHECK(gr_array_copy(zeros, back, sizeof(back)) == GR_OK && back[5] == -9 && back[0] == 0);
  gr_value_free(zeros);
  gr_value* three_value = gr_int(3);
  CHECK(gr_array_mutable_data(three_value, &room) == NULL && strstr(gr_last_error(), "expected a numpy array"));
  gr_value_free(three_value);
  const int64_t one[1] = {1};
  CHECK(gr_array("<f2", one, 1, data) == NULL && strstr(gr_last_error(), "unsupported dtype '<f2'"));
  CHECK(gr_array(">i4", one, 1, data) == NULL && strstr(gr_last_error(), "unsupported dtype"));
  CHECK(gr_array(NULL, one, 1, data) == NULL && strstr(gr_last_error(), "dtype is NULL"));
  const int64_t negative[1] = {-1};
  CHECK(gr_array("<i4", negative, 1, data) == NULL && strstr(gr_last_error(), "non-negative"));

  gr_value* s = gr_scalar_uint("<u8", UINT64_MAX);
  uint64_t u = 0;
  CHECK(gr_kind_of(s) == GR_SCALAR && gr_array_copy(s, &u, 8) == GR_OK && u == UINT64_MAX);
  gr_value_free(s);
  CheckRepr(gr_scalar_int("<i4", -7), "np.int32(-7)");
  CheckRepr(gr_scalar_float("<f4", 0.25), "np.float32(0.25)");
  CheckRepr(gr_scalar_bool(1), "np.bool(True)");
  CHECK(gr_scalar_float("<i4", 1.0) == NULL && strstr(gr_last_error(), "not a float dtype"));
  int64_t number = 0;
  gr_value* text = gr_str0("3");
  CHECK(gr_to_int64(text, &number) == GR_ENV_ERROR && strcmp(gr_last_error_type(), "TypeError") == 0);
  gr_value_free(text);

  gr_value* items = gr_list();
  gr_value* item = gr_str0("a");
  gr_list_append(items, item);
  gr_list_append(items, item);
  gr_value_free(item);
  const int64_t two[1] = {2};
  gr_value* objects = gr_object_array(two, 1, items);
  CHECK(gr_kind_of(objects) == GR_OBJECT_ARRAY && gr_len(objects) == 2);
  const int64_t three[1] = {3};
  CHECK(gr_object_array(three, 1, items) == NULL && strlen(gr_last_error()) > 0);
  gr_value* graph = gr_graph(a = gr_array("<f4", one, 1, data), NULL, NULL);
  CHECK(gr_kind_of(graph) == GR_GRAPH && gr_len(graph) == 3 && gr_kind_of(gr_item(graph, 1)) == GR_NONE);
  gr_value_free(a);
  gr_value_free(graph);
  gr_value_free(objects);
  gr_value_free(items);
}

static void TestSpaces(void) {
  const int64_t shape[1] = {2};
  gr_space* box = gr_space_box(-1.0, 1.0, shape, 1, "<f4");
  gr_space* dict = gr_space_dict();
  CHECK(gr_space_dict_add(dict, "b", box) == GR_OK);
  CHECK(gr_space_tuple_add(dict, box) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "not a Tuple"));
  gr_value* description = gr_space_describe(dict);
  CHECK(gr_kind_of(description) == GR_DICT && gr_len(description) > 0);
  gr_value_free(description);
  CHECK(gr_space_discrete(0, 0, "<i8") == NULL && strstr(gr_last_error(), "n must be positive"));
  CHECK(gr_space_box(0, 1, shape, 1, "complex128") == NULL && strstr(gr_last_error(), "complex128"));
  gr_space_free(box);
  gr_space_free(dict);
}

static void TestOptionsAndClient(void) {
  gr_options* options = gr_options_new();
  CHECK(gr_options_set_endpoint(options, "http://x") != GR_OK && strlen(gr_last_error()) > 0);
  CHECK(gr_options_set_seconds(options, GR_LIVENESS_TIMEOUT, 0) == GR_INVALID_ARGUMENT);
  CHECK(gr_options_set_seconds(options, 99, 1) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "unknown option 99"));
  CHECK(gr_options_set_security(options, "a", NULL, NULL) == GR_INVALID_ARGUMENT);
  CHECK(gr_options_set_security(options, NULL, NULL, "a shared secret") == GR_OK);
  CHECK(gr_options_set_endpoint(options, "tcp://127.0.0.1:9") == GR_OK);
  CHECK(gr_options_set_seconds(options, GR_CONNECT_TIMEOUT, 0.3) == GR_OK);
  gr_space* space = gr_space_discrete(2, 0, "int64");
  gr_env_callbacks callbacks;
  memset(&callbacks, 0, sizeof(callbacks));
  CHECK(gr_client_new(options, 1, space, space, &callbacks, NULL) == NULL && strstr(gr_last_error(), "struct_size"));
  callbacks.struct_size = sizeof(callbacks);
  CHECK(gr_client_new(options, 0, space, space, &callbacks, NULL) == NULL && strstr(gr_last_error(), "num_envs"));
  gr_client* client = gr_client_new(options, 1, space, space, &callbacks, NULL);
  CHECK(client != NULL && gr_client_state(client) == GR_STATE_NEW);
  CHECK(gr_client_pump(client, 0) == GR_INVALID_ARGUMENT && strstr(gr_last_error(), "before Start"));
  CHECK(gr_client_start(client) == GR_OK && gr_client_state(client) == GR_STATE_CONNECTING);
  CHECK(gr_client_pending_env(client) == -1);
  CHECK(gr_client_complete_step(client, 0, space == NULL ? NULL : gr_dict_find(NULL, "x"), 0, 0, 0, NULL) ==
        GR_INVALID_ARGUMENT);
  gr_status status = GR_OK;
  for (int k = 0; k < 100 && status == GR_OK; ++k) status = gr_client_pump(client, 0.05); /* nobody listens */
  CHECK(status == GR_TIMEOUT && gr_client_state(client) == GR_STATE_FAILED);
  CHECK(strstr(gr_client_error(client), "no answer from a server") != NULL);
  gr_client_free(client);
  gr_space_free(space);
  gr_options_free(options);
}

static char g_logged[4096];

static void Sink(void* user, int32_t level, const char* message) {
  (void)user;
  if (level >= 1 && strlen(g_logged) + strlen(message) + 2 < sizeof(g_logged)) {
    strcat(g_logged, message);
    strcat(g_logged, "\n");
  }
}

/* A client asked to stop leaves (BYE, logged through the sink) and ends GR_STOPPED, state closed. */
static void TestStopAndLogSink(void) {
  gr_options* options = gr_options_new();
  CHECK(gr_options_set_endpoint(options, "tcp://127.0.0.1:9") == GR_OK);
  gr_space* space = gr_space_discrete(2, 0, "int64");
  gr_env_callbacks callbacks;
  memset(&callbacks, 0, sizeof(callbacks));
  callbacks.struct_size = sizeof(callbacks);
  gr_client* client = gr_client_new(options, 2, space, space, &callbacks, NULL);
  gr_set_log_sink(Sink, NULL);
  gr_set_log_level(1);
  CHECK(gr_client_start(client) == GR_OK);
  CHECK(gr_client_pump(client, 0) == GR_OK && gr_client_state(client) == GR_STATE_CONNECTING);
  gr_client_request_stop(client);
  CHECK(gr_client_pump(client, 1.0) == GR_STOPPED && gr_client_state(client) == GR_STATE_CLOSED);
  CHECK(strstr(gr_client_error(client), "stopped") != NULL);
  CHECK(gr_client_pump(client, 0) == GR_STOPPED); /* the final status again */
  gr_set_log_level(3);
  gr_set_log_sink(NULL, NULL);
  CHECK(strstr(g_logged, "leaving") != NULL);
  gr_client_free(client);
  gr_space_free(space);
  gr_options_free(options);
}

int main(void) {
  gr_set_log_level(3);
  TestVersion();
  TestScalars();
  TestBigInts();
  TestContainers();
  TestArrays();
  TestSpaces();
  TestOptionsAndClient();
  TestStopAndLogSink();
  if (g_failures != 0) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("c_api_tests: all checks passed\n");
  return 0;
}
