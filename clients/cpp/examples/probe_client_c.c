/* gym_remote_probe_client_c: the conformance probe env gym_remote/Probe-v0 (docs/CONFORMANCE.md §1)
 * written in C against gym_remote.h alone, with the command line of gym_remote_probe_client, plus
 *
 *   --frame-paced   drive the client as a game does: one gr_client_pump(client, 0) per simulated frame
 *                   (about 1 ms apart), and answer each step GR_PENDING, completing it on the next frame.
 *
 * Exit statuses: 0 after the server closed, 1 failed, 2 bad usage, 130 SIGINT, 143 SIGTERM. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gym_remote/gym_remote.h"

#define EPISODE_LIMIT 5 /* every episode is truncated at this step */

static const char* g_program = "gym_remote_probe_client_c";
static gr_client* volatile g_client = NULL;
static volatile sig_atomic_t g_signal = 0;

/* ---- the probe env ---------------------------------------------------------------------------------- */

typedef struct {
  int64_t draw, base, level, t, term_step;
  float zeta[2];
  int8_t bits[2];
} Probe;

/* A step answered later (--frame-paced): the result, or the error, and the frame it was asked in. */
typedef struct {
  int held;
  long frame;
  gr_status status;
  gr_value* observation;
  gr_value* info;
  double reward;
  int32_t terminated, truncated;
  char type[64], module[64], message[512];
} Held;

typedef struct {
  Probe* envs;
  Held* held;
  int frame_paced;
  long frame;
} Host;


/* Keeps the first failure of a chain of value calls (a NULL handle, a non-zero status). */
static int g_broken = 0;
static gr_value* Ok(gr_value* value) {
  if (value == NULL) g_broken = 1;
  return value;
}
static void Check(gr_status status) {
  if (status != GR_OK) g_broken = 1;
}

/* dict[key] = item and sequence.append(item), moving item in (a NULL item, a failed constructor: broken). */
static void Put(gr_value* dict, const char* key, gr_value* item) { Check(gr_dict_set_take(dict, key, item)); }
static void Add(gr_value* sequence, gr_value* item) { Check(gr_list_append_take(sequence, item)); }

static gr_value* Observation(const Probe* p) {
  const int64_t b = p->base, t = p->t;
  const int64_t shape2[1] = {2}, shape3[1] = {3};
  const int64_t mid0[2] = {(b + t) % 4, (3 * b + t) % 6};
  const int8_t mid1[3] = {p->bits[0], p->bits[1], (int8_t)((b + t) % 2)};
  gr_value* obs = Ok(gr_dict());
  gr_value* mid = Ok(gr_tuple());
  Put(obs, "zeta", gr_array("<f4", shape2, 1, p->zeta));
  Put(obs, "alpha", gr_scalar_int("<i8", -3 + (b + t) % 16));
  Add(mid, gr_array("<i8", shape2, 1, mid0));
  Add(mid, gr_array("|i1", shape3, 1, mid1));
  Put(obs, "mid", mid);
  return obs;
}

/* The exception the env raised last, also kept here for a step answered later. */
static char g_raised_type[64], g_raised_module[64], g_raised_message[512];
static gr_status Raise(gr_error* error, const char* type, const char* module, const char* message) {
  snprintf(g_raised_type, sizeof(g_raised_type), "%s", type);
  snprintf(g_raised_module, sizeof(g_raised_module), "%s", module ? module : "builtins");
  snprintf(g_raised_message, sizeof(g_raised_message), "%s", message);
  gr_error_set(error, type, module, message);
  return GR_ENV_ERROR;
}
/* Raises the exception of the last failed gr_ call (an env error keeps its type). */
static gr_status RaiseLast(gr_error* error) {
  const char* type = gr_last_error_type();
  const char* module = gr_last_error_module();
  return Raise(error, type[0] ? type : "RuntimeError", module[0] ? module : NULL, gr_last_error());
}

/* seed % 1000 of a seed of any size, from its hex digits. */
static int64_t HexMod1000(const char* hex) {
  int64_t r = 0;
  for (; *hex; ++hex) {
    const int d = *hex >= 'a' ? *hex - 'a' + 10 : *hex - '0';
    r = (r * 16 + d) % 1000;
  }
  return r;
}

static gr_status Reset(void* user, size_t env, int32_t has_seed, uint64_t seed, const gr_value* seed_value,
                       const gr_value* options, gr_value* observation, gr_value* info, gr_error* error) {
  Probe* p = &((Host*)user)->envs[env];
  int64_t offset = 0;
  const gr_value* given = NULL;
  if (options != NULL && (gr_kind_of(options) == GR_DICT || gr_kind_of(options) == GR_PAIR_DICT)) {
    given = gr_dict_find(options, "offset");
  }
  if (given != NULL) {
    int64_t number = -1;
    if (gr_kind_of(given) != GR_INT || gr_as_int64(given, &number) != GR_OK || number < 0 || number >= 1000) {
      char message[256];
      char* text = gr_value_repr(given);
      snprintf(message, sizeof(message), "options['offset'] must be an int in [0, 1000), not %s", text ? text : "?");
      gr_string_free(text);
      return Raise(error, "ValueError", NULL, message);
    }
    offset = number;
  }
  if (has_seed == 1) p->draw = (int64_t)(seed % 1000u);
  else if (has_seed == 2) p->draw = HexMod1000(gr_big_int_hex_of(seed_value));
  else p->draw = (p->draw * 37 + 11) % 1000;
  p->base = p->draw + offset;
  p->level = p->base % 7;
  p->t = 0;
  p->term_step = 2 + p->base % 5;
  p->zeta[0] = (float)((double)p->base / 4.0);
  p->zeta[1] = (float)((double)-p->base / 8.0);
  p->bits[0] = p->bits[1] = 0;
  g_broken = 0;
  Check(gr_value_take(observation, Observation(p)));
  Put(info, "base", gr_int(p->base));
  Put(info, "seeded", gr_bool(has_seed != 0));
  Put(info, "offset", gr_int(offset));
  return g_broken ? RaiseLast(error) : GR_OK;
}

/* The probe's step: its result into obs/info/reward/..., or an env error. */
static gr_status Advance(Probe* p, const gr_value* action, gr_value** obs, gr_value** info, double* reward,
                         int32_t* terminated, int32_t* truncated, gr_error* error) {
  char message[256];
  const gr_kind kind = gr_kind_of(action);
  if ((kind != GR_TUPLE && kind != GR_LIST) || gr_len(action) != 3) {
    char* text = gr_value_repr(action);
    snprintf(message, sizeof(message), "the probe's action is (direction, push, pressed), got %s", text ? text : "?");
    gr_string_free(text);
    return Raise(error, "TypeError", NULL, message);
  }
  int64_t direction = 0;
  if (gr_to_int64(gr_item(action, 0), &direction) != GR_OK) return RaiseLast(error);
  double push[2];
  size_t pushes = 0;
  if (gr_to_doubles(gr_item(action, 1), push, 2, &pushes) != GR_OK) return RaiseLast(error);
  if (pushes != 1 && pushes != 2) {
    snprintf(message, sizeof(message), "operands could not be broadcast together with shapes (2,) (%zu,)", pushes);
    return Raise(error, "ValueError", NULL, message);
  }
  int64_t pressed[2];
  size_t presses = 0;
  if (gr_to_int64s(gr_item(action, 2), pressed, 2, &presses) != GR_OK) return RaiseLast(error);
  if (presses < 2) {
    snprintf(message, sizeof(message), "index %zu is out of bounds for axis 0 with size %zu", presses, presses);
    return Raise(error, "IndexError", NULL, message);
  }
  p->bits[0] = (int8_t)pressed[0];
  p->bits[1] = (int8_t)pressed[1];
  p->t += 1;
  p->level += direction;
  for (int i = 0; i < 2; ++i) { /* IEEE float32: zeta + float32(push * 0.5) */
    const float push_i = (float)push[pushes == 1 ? 0 : i];
    const float half = push_i * 0.5f;
    p->zeta[i] = p->zeta[i] + half;
  }
  const int64_t t = p->t;
  if (t >= 256) return Raise(error, "ValueError", NULL, "bytes must be in range(0, 256)");
  *reward = (double)p->level + 0.25 * (double)(p->bits[0] + 2 * p->bits[1]);
  *terminated = t == p->term_step;
  *truncated = t >= EPISODE_LIMIT;
  g_broken = 0;
  gr_value* out = Ok(gr_dict());
  const int64_t shape2[1] = {2};
  const int16_t vec[2] = {(int16_t)t, (int16_t)-t};
  char hex[40];
  snprintf(hex, sizeof(hex), "1%016llx", (unsigned long long)t); /* 2**64 + t: tag "i" */
  const unsigned char blob[3] = {(unsigned char)t, 0, 255};
  Put(out, "t", gr_int(t));
  Put(out, "half", gr_float((double)t / 2.0));
  Put(out, "even", gr_bool(t % 2 == 0));
  Put(out, "level", gr_scalar_int("<i4", p->level));
  Put(out, "quarter", gr_scalar_float("<f4", (double)t / 4.0));
  Put(out, "vec", gr_array("<i2", shape2, 1, vec));
  gr_value* pair = Ok(gr_tuple());
  Add(pair, gr_int(t));
  Add(pair, gr_str0("x"));
  Put(out, "pair", pair);
  gr_value* items = Ok(gr_list());
  Add(items, gr_big_int_hex(hex));
  Add(items, gr_none());
  Add(items, gr_float(1.5));
  Put(out, "items", items);
  Put(out, "none", gr_none());
  Put(out, "nan", gr_float(NAN));
  Put(out, "blob", gr_bytes(blob, 3));
  Put(out, "name", gr_str0("prob\xc3\xa9"));
  if (t % 2 == 1) {
    gr_value* odd = Ok(gr_dict());
    Put(odd, "t", gr_int(t));
    Put(odd, "inf", gr_float(INFINITY));
    Put(out, "odd", odd);
  }
  *info = out;
  *obs = Observation(p);
  if (g_broken || *obs == NULL) {
    gr_value_free(*info);
    gr_value_free(*obs);
    return RaiseLast(error);
  }
  return GR_OK;
}

static gr_status Step(void* user, size_t env, const gr_value* action, gr_step_result* result, gr_error* error) {
  Host* host = (Host*)user;
  gr_value *obs = NULL, *info = NULL;
  double reward = 0;
  int32_t terminated = 0, truncated = 0;
  const gr_status status = Advance(&host->envs[env], action, &obs, &info, &reward, &terminated, &truncated, error);
  if (host->frame_paced) { /* answered on the next frame */
    Held* held = &host->held[env];
    held->held = 1;
    held->frame = host->frame;
    held->status = status;
    held->observation = obs;
    held->info = info;
    held->reward = reward;
    held->terminated = terminated;
    held->truncated = truncated;
    if (status != GR_OK) { /* what Advance raised, for gr_client_fail_step */
      snprintf(held->type, sizeof(held->type), "%s", g_raised_type);
      snprintf(held->module, sizeof(held->module), "%s", g_raised_module);
      snprintf(held->message, sizeof(held->message), "%s", g_raised_message);
    }
    return GR_PENDING;
  }
  if (status != GR_OK) return status;
  return gr_step_result_take(result, obs, reward, terminated, truncated, info) == GR_OK ? GR_OK : RaiseLast(error);
}

/* ---- the command line ------------------------------------------------------------------------------- */

static void OnSignal(int number) {
  g_signal = number;
  if (g_client != NULL) gr_client_request_stop(g_client);
}

static void Usage(FILE* out) {
  fprintf(out,
          "usage: %s [-h] [--num-envs K] [--name NAME] [--liveness-timeout SECONDS]\n"
          "       [--connect-timeout SECONDS] [--slot-timeout SECONDS] [--reconnect-timeout SECONDS]\n"
          "       [--no-reconnect] [--exit-if-full] [--no-data-plane] [--spin SECONDS] [--server-key PATH]\n"
          "       [--client-key PATH] [--secret-file PATH] [--log-level {DEBUG,INFO,WARNING,ERROR}]\n"
          "       [--frame-paced] ENDPOINT\n",
          g_program);
}

static int UsageError(const char* what, const char* detail) {
  Usage(stderr);
  fprintf(stderr, "%s: error: %s%s\n", g_program, what, detail ? detail : "");
  return 2;
}

static int Seconds(const char* text, double* out) {
  char* end = NULL;
  errno = 0;
  const double value = strtod(text, &end);
  if (*text == '\0' || *end != '\0' || errno == ERANGE || isnan(value) || value <= 0) return 0;
  *out = value;
  return 1;
}

int main(int argc, char** argv) {
  const char* slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
  if (argc > 0) g_program = slash ? slash + 1 : argv[0];
  const char *endpoint = NULL, *server_key = NULL, *client_key = NULL, *secret_file = NULL, *name = NULL;
  long num_envs = 1;
  int frame_paced = 0, reconnect = 1, wait_for_slot = 1, data_plane = -1, level = 2;
  double seconds[5] = {-1, -1, -1, -1, -1}; /* by GR_CONNECT_TIMEOUT .. GR_SPIN */
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    int which = -1;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      Usage(stdout);
      return 0;
    } else if (strcmp(a, "--frame-paced") == 0) {
      frame_paced = 1;
    } else if (strcmp(a, "--no-reconnect") == 0) {
      reconnect = 0;
    } else if (strcmp(a, "--exit-if-full") == 0) {
      wait_for_slot = 0;
    } else if (strcmp(a, "--no-data-plane") == 0) {
      data_plane = 0;
    } else if (a[0] == '-' && a[1] == '-') {
      if (value == NULL) return UsageError("expected one argument after ", a);
      ++i;
      if (strcmp(a, "--num-envs") == 0) {
        char* end = NULL;
        num_envs = strtol(value, &end, 10);
        if (*value == '\0' || *end != '\0' || num_envs < 1 || num_envs > 65535) {
          return UsageError("argument --num-envs: must be an int in 1..65535, got ", value);
        }
      } else if (strcmp(a, "--name") == 0) {
        name = value;
      } else if (strcmp(a, "--connect-timeout") == 0) {
        which = GR_CONNECT_TIMEOUT;
      } else if (strcmp(a, "--slot-timeout") == 0) {
        which = GR_SLOT_TIMEOUT;
      } else if (strcmp(a, "--reconnect-timeout") == 0) {
        which = GR_RECONNECT_TIMEOUT;
      } else if (strcmp(a, "--liveness-timeout") == 0) {
        which = GR_LIVENESS_TIMEOUT;
      } else if (strcmp(a, "--spin") == 0) {
        which = GR_SPIN;
      } else if (strcmp(a, "--server-key") == 0) {
        server_key = value;
      } else if (strcmp(a, "--client-key") == 0) {
        client_key = value;
      } else if (strcmp(a, "--secret-file") == 0) {
        secret_file = value;
      } else if (strcmp(a, "--log-level") == 0) {
        const char* names[4] = {"DEBUG", "INFO", "WARNING", "ERROR"};
        level = -1;
        for (int k = 0; k < 4; ++k) {
          if (strcmp(value, names[k]) == 0) level = k;
        }
        if (level < 0) return UsageError("argument --log-level: invalid choice: ", value);
      } else {
        return UsageError("unrecognized arguments: ", a);
      }
      if (which >= 0 && !Seconds(value, &seconds[which]) && !(which == GR_SPIN && strcmp(value, "0") == 0)) {
        return UsageError("invalid number of seconds: ", value);
      }
      if (which == GR_SPIN && strcmp(value, "0") == 0) seconds[GR_SPIN] = 0;
    } else if (endpoint == NULL) {
      endpoint = a;
    } else {
      return UsageError("unrecognized arguments: ", a);
    }
  }
  if (endpoint == NULL) return UsageError("the following arguments are required: ENDPOINT", NULL);
  gr_set_log_level(level);
  gr_options* options = gr_options_new();
  if (gr_options_set_endpoint(options, endpoint) != GR_OK) return UsageError(gr_last_error(), NULL);
  if (name != NULL) gr_options_set_name(options, name);
  for (int which = 0; which < 5; ++which) {
    if (seconds[which] >= 0 && gr_options_set_seconds(options, which, seconds[which]) != GR_OK) {
      return UsageError(gr_last_error(), NULL);
    }
  }
  gr_options_set_flag(options, GR_RECONNECT, reconnect);
  gr_options_set_flag(options, GR_WAIT_FOR_SLOT, wait_for_slot);
  if (data_plane >= 0) gr_options_set_flag(options, GR_DATA_PLANE, data_plane);
  if (secret_file != NULL) {
    if (gr_options_set_secret_file(options, secret_file) != GR_OK) return UsageError(gr_last_error(), NULL);
  } else if (server_key != NULL || client_key != NULL) {
    if (gr_options_set_security(options, server_key, client_key, NULL) != GR_OK) return UsageError(gr_last_error(), NULL);
  }

  /* The probe's spaces and metadata. */
  const int64_t two[1] = {2}, nvec[2] = {4, 6}, three[1] = {3};
  gr_space* observation_space = gr_space_dict();
  gr_space* zeta = gr_space_box(-INFINITY, INFINITY, two, 1, "<f4");
  gr_space* alpha = gr_space_discrete(16, -3, "<i8");
  gr_space* mid = gr_space_tuple();
  gr_space* nvec_space = gr_space_multi_discrete(nvec, NULL, 2, "<i8");
  gr_space* bits = gr_space_multi_binary(three, 1);
  gr_space_tuple_add(mid, nvec_space);
  gr_space_tuple_add(mid, bits);
  gr_space_dict_add(observation_space, "zeta", zeta);
  gr_space_dict_add(observation_space, "alpha", alpha);
  gr_space_dict_add(observation_space, "mid", mid);
  gr_space* action_space = gr_space_tuple();
  gr_space* direction = gr_space_discrete(3, -1, "<i8");
  gr_space* push = gr_space_box(-1.0, 1.0, two, 1, "<f4");
  gr_space* pressed = gr_space_multi_binary(two, 1);
  gr_space_tuple_add(action_space, direction);
  gr_space_tuple_add(action_space, push);
  gr_space_tuple_add(action_space, pressed);
  gr_value* metadata = gr_dict();
  gr_value* modes = gr_list();
  Add(modes, gr_str0("ansi"));
  Put(metadata, "render_modes", modes);
  Put(metadata, "render_fps", gr_int(4));

  Host host;
  host.envs = calloc((size_t)num_envs, sizeof(Probe));
  host.held = calloc((size_t)num_envs, sizeof(Held));
  host.frame_paced = frame_paced;
  host.frame = 0;
  gr_env_callbacks callbacks;
  memset(&callbacks, 0, sizeof(callbacks));
  callbacks.struct_size = sizeof(callbacks);
  callbacks.class_name = "ProbeEnv";
  callbacks.metadata = metadata;
  callbacks.reset = Reset;
  callbacks.step = Step;
  gr_client* client =
      gr_client_new(options, (size_t)num_envs, observation_space, action_space, &callbacks, &host);
  gr_space* spaces[] = {observation_space, zeta, alpha, mid, nvec_space, bits, action_space, direction, push, pressed};
  for (size_t k = 0; k < sizeof(spaces) / sizeof(spaces[0]); ++k) gr_space_free(spaces[k]);
  gr_value_free(metadata);
  gr_options_free(options);
  if (client == NULL || g_broken) {
    fprintf(stderr, "%s: error: %s\n", g_program, gr_last_error());
    return 1;
  }
  g_client = client;
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGINT, &action, NULL);
  if (g_signal != 0) gr_client_request_stop(client);

  gr_status status;
  if (!frame_paced) {
    status = gr_client_run(client);
  } else {
    status = gr_client_start(client);
    const struct timespec frame = {0, 1000000};
    while (status == GR_OK && gr_client_state(client) < GR_STATE_CLOSED) {
      const int64_t awaited = gr_client_pending_env(client);
      if (awaited >= 0 && host.held[awaited].held && host.held[awaited].frame < host.frame) {
        Held* held = &host.held[awaited];
        if (held->status == GR_OK) {
          gr_client_complete_step(client, (size_t)awaited, held->observation, held->reward, held->terminated,
                                  held->truncated, held->info);
        } else {
          gr_client_fail_step(client, (size_t)awaited, held->type, held->module, held->message);
        }
        gr_value_free(held->observation);
        gr_value_free(held->info);
        held->observation = held->info = NULL;
        held->held = 0;
      }
      status = gr_client_pump(client, 0.0);
      nanosleep(&frame, NULL);
      host.frame += 1;
    }
  }
  const gr_state state = gr_client_state(client);
  char message[1024];
  snprintf(message, sizeof(message), "%s", status == GR_OK ? "" : gr_last_error());
  g_client = NULL;
  gr_client_free(client);
  for (long k = 0; k < num_envs; ++k) {
    gr_value_free(host.held[k].observation);
    gr_value_free(host.held[k].info);
  }
  free(host.envs);
  free(host.held);
  (void)state;
  if (status == GR_OK) return 0;
  if (status == GR_STOPPED) return g_signal == SIGINT ? 130 : 143;
  fprintf(stderr, "%s: error: %s\n", g_program, message);
  return status == GR_INVALID_ARGUMENT ? 2 : 1;
}
