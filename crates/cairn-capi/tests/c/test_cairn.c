/* The C API from C: every function of include/cairn.h, with its errors (null pointers, a bad
 * table name, a locked session, a closed session, a read-only one, a proof verified and forged
 * ones rejected). Built and run by tests/c_program.rs; usage: test_cairn DIR (an empty
 * directory). Prints one line per check group and exits 0 when all hold. */

#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn.h"

static int failures = 0;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);         \
      failures++;                                                                     \
    }                                                                                 \
  } while (0)

/* Checks that `call` returned `code`, printing the message when it did not; frees `err`. */
#define EXPECT(code, call)                                                            \
  do {                                                                                \
    cairn_error *err_ = NULL;                                                         \
    cairn_error **errp_ = &err_;                                                      \
    int got_ = (call);                                                                \
    if (got_ != (code)) {                                                             \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s: %s\n", __FILE__, __LINE__, \
              #call, cairn_code_name(got_), cairn_code_name(code),                    \
              cairn_error_message(err_));                                             \
      failures++;                                                                     \
    } else if ((code) != CAIRN_OK) {                                                  \
      CHECK(err_ != NULL && cairn_error_code(err_) == (code));                        \
      CHECK(strlen(cairn_error_message(err_)) > 0);                                   \
    } else {                                                                          \
      CHECK(err_ == NULL);                                                            \
    }                                                                                 \
    cairn_error_free(err_);                                                           \
    (void)errp_;                                                                      \
  } while (0)

/* `ERR` inside an EXPECT: the error out-pointer. */
#define ERR errp_

/* A batch of byte strings laid end to end, as the batched calls take them. */
typedef struct {
  uint8_t bytes[1024];
  size_t lens[16];
  size_t count;
  size_t used;
} flat;

static void flat_push(flat *f, const char *s) {
  size_t len = strlen(s);
  memcpy(f->bytes + f->used, s, len);
  f->used += len;
  f->lens[f->count++] = len;
}

static flat flat_of(const char *const *items, size_t n) {
  flat f;
  memset(&f, 0, sizeof f);
  for (size_t i = 0; i < n; i++) flat_push(&f, items[i]);
  return f;
}

static int value_is(const cairn_values *v, size_t i, const char *expected) {
  size_t len = v->offsets[i + 1] - v->offsets[i];
  return v->found[i] == 1 && len == strlen(expected) &&
         memcmp(v->data + v->offsets[i], expected, len) == 0;
}

static atomic_int callback_code = -1;
static atomic_int callback_calls = 0;

static void on_durable(void *ctx, int code) {
  CHECK(ctx == (void *)&callback_code);
  atomic_store(&callback_code, code);
  atomic_fetch_add(&callback_calls, 1);
}

static void errors_and_names(const char *dir) {
  cairn_session *s = NULL;
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_session_open(NULL, false, &s, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_session_open(dir, false, NULL, ERR));
  /* A null error out-pointer: the code alone. */
  CHECK(cairn_session_open(NULL, false, &s, NULL) == CAIRN_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK(strcmp(cairn_code_name(CAIRN_ERR_LOCKED), "CAIRN_ERR_LOCKED") == 0);
  CHECK(strcmp(cairn_code_name(12345), "CAIRN_ERR_UNKNOWN") == 0);
  CHECK(cairn_error_code(NULL) == CAIRN_ERR_INVALID_ARGUMENT);
  CHECK(strcmp(cairn_error_message(NULL), "") == 0);
  cairn_error_free(NULL);
  cairn_session_close(NULL);
  cairn_session_free(NULL);
  cairn_table_free(NULL);
  cairn_cursor_free(NULL);
  cairn_durability_free(NULL);
  cairn_values_free(NULL);
  cairn_bytes_free(NULL);
  cairn_entries_free(NULL);
  cairn_values zeroed_values;
  memset(&zeroed_values, 0, sizeof zeroed_values);
  cairn_values_free(&zeroed_values);
  cairn_entries zeroed_entries;
  memset(&zeroed_entries, 0, sizeof zeroed_entries);
  cairn_entries_free(&zeroed_entries);
  printf("errors and names: ok\n");
}

static void updates_and_lookups(cairn_table *t) {
  const char *keys[] = {"alice", "bob", "carol"};
  const char *vals[] = {"100", "200", "300"};
  flat k = flat_of(keys, 3), v = flat_of(vals, 3);
  uint8_t kinds[] = {CAIRN_UPDATE_INSERT, CAIRN_UPDATE_INSERT, CAIRN_UPDATE_UPSERT};
  EXPECT(CAIRN_OK, cairn_updates(t, kinds, k.bytes, k.lens, v.bytes, v.lens, 3, ERR));
  /* A delete with a value, an unknown kind, null buffers: the whole batch refused. */
  uint8_t bad_delete[] = {CAIRN_UPDATE_INSERT, CAIRN_UPDATE_DELETE, CAIRN_UPDATE_INSERT};
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_updates(t, bad_delete, k.bytes, k.lens, v.bytes, v.lens, 3, ERR));
  uint8_t bad_kind[] = {9, 9, 9};
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_updates(t, bad_kind, k.bytes, k.lens, v.bytes, v.lens, 3, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_updates(t, kinds, NULL, k.lens, v.bytes, v.lens, 3, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_updates(NULL, kinds, k.bytes, k.lens, v.bytes, v.lens, 3, ERR));
  /* An empty batch may pass null everywhere. */
  EXPECT(CAIRN_OK, cairn_updates(t, NULL, NULL, NULL, NULL, NULL, 0, ERR));

  const char *ask[] = {"alice", "dave", "carol"};
  flat q = flat_of(ask, 3);
  cairn_values got;
  memset(&got, 0, sizeof got);
  EXPECT(CAIRN_OK, cairn_lookups(t, q.bytes, q.lens, 3, &got, ERR));
  CHECK(got.count == 3);
  CHECK(value_is(&got, 0, "100"));
  CHECK(got.found[1] == 0 && got.offsets[1] == got.offsets[2]);
  CHECK(value_is(&got, 2, "300"));
  CHECK(got.offsets[3] == got.data_len);
  cairn_values_free(&got);
  CHECK(got.data == NULL && got.count == 0);
  cairn_values_free(&got); /* cleared: freeing again is allowed */
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_lookups(t, q.bytes, q.lens, 3, NULL, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_lookups(t, q.bytes, NULL, 3, &got, ERR));
  /* A key over the maximum. */
  static uint8_t huge[70000];
  size_t huge_len = sizeof huge;
  EXPECT(CAIRN_ERR_TOO_LARGE, cairn_lookups(t, huge, &huge_len, 1, &got, ERR));
  printf("updates and lookups: ok\n");
}

static void durable_write(cairn_table *t) {
  const char *keys[] = {"bob", "carol"};
  const char *vals[] = {"250", ""};
  flat k = flat_of(keys, 2), v = flat_of(vals, 2);
  uint8_t kinds[] = {CAIRN_UPDATE_UPSERT, CAIRN_UPDATE_DELETE};
  cairn_durability *d = NULL;
  EXPECT(CAIRN_OK, cairn_write(t, kinds, k.bytes, k.lens, v.bytes, v.lens, 2, &d, ERR));
  CHECK(d != NULL);
  CHECK(cairn_durability_position(d) > 0);
  CHECK(cairn_durability_position(NULL) == 0);
  EXPECT(CAIRN_OK, cairn_durability_on_durable(d, on_durable, &callback_code, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_durability_on_durable(d, NULL, NULL, ERR));
  EXPECT(CAIRN_OK, cairn_durability_wait(d, ERR));
  bool durable = false;
  EXPECT(CAIRN_OK, cairn_durability_is_durable(d, &durable, ERR));
  CHECK(durable);
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_durability_is_durable(d, NULL, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_durability_wait(NULL, ERR));
  /* The callback runs on the syncer thread once the write is durable: wait up to 10 s. */
  for (int i = 0; i < 1000 && atomic_load(&callback_calls) == 0; i++) {
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  CHECK(atomic_load(&callback_calls) == 1);
  CHECK(atomic_load(&callback_code) == CAIRN_OK);
  cairn_durability_free(d);
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_write(t, kinds, k.bytes, k.lens, v.bytes, v.lens, 2, NULL, ERR));
  printf("durable write: ok\n");
}

/* Reads the cursor to its end into `out` as "k=v," pairs. */
static void read_all(cairn_cursor *c, char *out, size_t cap) {
  out[0] = 0;
  for (;;) {
    bool has = false;
    const uint8_t *key, *value;
    size_t key_len, value_len;
    int code = cairn_cursor_next(c, &has, &key, &key_len, &value, &value_len, NULL);
    CHECK(code == CAIRN_OK);
    if (code != CAIRN_OK || !has) break;
    size_t at = strlen(out);
    snprintf(out + at, cap - at, "%.*s=%.*s,", (int)key_len, (const char *)key,
             (int)value_len, (const char *)value);
  }
}

static void cursors(cairn_table *t) {
  char seen[256];
  cairn_cursor *c = NULL;
  EXPECT(CAIRN_OK, cairn_cursor_open(t, NULL, 0, NULL, 0, &c, ERR));
  read_all(c, seen, sizeof seen);
  CHECK(strcmp(seen, "alice=100,bob=250,") == 0);
  /* Seek back to "b". */
  EXPECT(CAIRN_OK, cairn_cursor_seek(c, (const uint8_t *)"b", 1, ERR));
  read_all(c, seen, sizeof seen);
  CHECK(strcmp(seen, "bob=250,") == 0);
  bool has;
  const uint8_t *key, *value;
  size_t key_len, value_len;
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_cursor_next(c, NULL, &key, &key_len, &value, &value_len, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_cursor_next(NULL, &has, &key, &key_len, &value, &value_len, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_cursor_seek(c, NULL, 3, ERR));
  cairn_cursor_free(c);
  /* [a, b): alice only. */
  EXPECT(CAIRN_OK, cairn_cursor_open(t, (const uint8_t *)"a", 1, (const uint8_t *)"b", 1, &c,
                                     ERR));
  read_all(c, seen, sizeof seen);
  CHECK(strcmp(seen, "alice=100,") == 0);
  cairn_cursor_free(c);
  /* Many entries per call: one, then the rest (fewer than asked: the end). */
  EXPECT(CAIRN_OK, cairn_cursor_open(t, NULL, 0, NULL, 0, &c, ERR));
  cairn_entries batch;
  EXPECT(CAIRN_OK, cairn_cursor_read(c, 1, &batch, ERR));
  CHECK(batch.count == 1 && batch.key_offsets[1] == 5 && memcmp(batch.keys, "alice", 5) == 0);
  CHECK(batch.value_offsets[1] == 3 && memcmp(batch.values, "100", 3) == 0);
  cairn_entries_free(&batch);
  CHECK(batch.keys == NULL && batch.count == 0);
  cairn_entries_free(&batch);
  EXPECT(CAIRN_OK, cairn_cursor_read(c, 10, &batch, ERR));
  CHECK(batch.count == 1 && batch.keys_len == 3 && memcmp(batch.keys, "bob", 3) == 0);
  CHECK(batch.values_len == 3 && memcmp(batch.values, "250", 3) == 0);
  cairn_entries_free(&batch);
  EXPECT(CAIRN_OK, cairn_cursor_read(c, 10, &batch, ERR));
  CHECK(batch.count == 0 && batch.key_offsets[0] == 0);
  cairn_entries_free(&batch);
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_cursor_read(c, 0, &batch, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_cursor_read(c, 1, NULL, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_cursor_read(NULL, 1, &batch, ERR));
  cairn_cursor_free(c);
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_cursor_open(t, NULL, 4, NULL, 0, &c, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_cursor_open(t, NULL, 0, NULL, 0, NULL, ERR));
  printf("cursors: ok\n");
}

static void roots_and_proofs(cairn_table *t, cairn_table *plain) {
  uint8_t root[CAIRN_ROOT_BYTES], proved_root[CAIRN_ROOT_BYTES];
  uint64_t version = 0, proved_version = 0;
  int auth = 0;
  EXPECT(CAIRN_OK, cairn_root(t, root, &version, &auth, ERR));
  CHECK(auth == CAIRN_AUTH_SHA256);
  CHECK(version > 0);
  EXPECT(CAIRN_OK, cairn_root(t, root, NULL, NULL, ERR));
  EXPECT(CAIRN_ERR_NOT_AUTHENTICATED, cairn_root(plain, root, NULL, NULL, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_root(t, NULL, NULL, NULL, ERR));

  /* alice holds 100, carol is absent (deleted). */
  const char *keys[] = {"alice", "carol"};
  flat k = flat_of(keys, 2);
  cairn_bytes proof = {NULL, 0};
  EXPECT(CAIRN_OK, cairn_prove(t, k.bytes, k.lens, 2, &proof, proved_root, &proved_version,
                               ERR));
  CHECK(proof.len > 0);
  CHECK(memcmp(root, proved_root, CAIRN_ROOT_BYTES) == 0 && proved_version == version);
  EXPECT(CAIRN_ERR_NOT_AUTHENTICATED,
         cairn_prove(plain, k.bytes, k.lens, 2, &proof, proved_root, NULL, ERR));

  const char *truth[] = {"100", ""};
  const char *forged[] = {"999", ""};
  flat v = flat_of(truth, 2), f = flat_of(forged, 2);
  uint8_t present[] = {1, 0};
  EXPECT(CAIRN_OK, cairn_proof_verify(CAIRN_AUTH_SHA256, root, proof.data, proof.len, k.bytes,
                                      k.lens, v.bytes, v.lens, present, 2, ERR));
  /* A forged value, a key claimed absent that is present, a tampered proof, another root, the
   * wrong hash: each rejected. */
  EXPECT(CAIRN_ERR_PROOF_INVALID,
         cairn_proof_verify(CAIRN_AUTH_SHA256, root, proof.data, proof.len, k.bytes, k.lens,
                            f.bytes, f.lens, present, 2, ERR));
  uint8_t both_absent[] = {0, 0};
  const char *empty[] = {"", ""};
  flat e = flat_of(empty, 2);
  EXPECT(CAIRN_ERR_PROOF_INVALID,
         cairn_proof_verify(CAIRN_AUTH_SHA256, root, proof.data, proof.len, k.bytes, k.lens,
                            e.bytes, e.lens, both_absent, 2, ERR));
  proof.data[proof.len - 1] ^= 1;
  EXPECT(CAIRN_ERR_PROOF_INVALID,
         cairn_proof_verify(CAIRN_AUTH_SHA256, root, proof.data, proof.len, k.bytes, k.lens,
                            v.bytes, v.lens, present, 2, ERR));
  proof.data[proof.len - 1] ^= 1;
  uint8_t other_root[CAIRN_ROOT_BYTES];
  memcpy(other_root, root, sizeof other_root);
  other_root[0] ^= 1;
  EXPECT(CAIRN_ERR_PROOF_INVALID,
         cairn_proof_verify(CAIRN_AUTH_SHA256, other_root, proof.data, proof.len, k.bytes,
                            k.lens, v.bytes, v.lens, present, 2, ERR));
  EXPECT(CAIRN_ERR_PROOF_INVALID,
         cairn_proof_verify(CAIRN_AUTH_BLAKE3, root, proof.data, proof.len, k.bytes, k.lens,
                            v.bytes, v.lens, present, 2, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_proof_verify(CAIRN_AUTH_NONE, root, proof.data, proof.len, k.bytes, k.lens,
                            v.bytes, v.lens, present, 2, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT,
         cairn_proof_verify(CAIRN_AUTH_SHA256, NULL, proof.data, proof.len, k.bytes, k.lens,
                            v.bytes, v.lens, present, 2, ERR));
  cairn_bytes_free(&proof);
  CHECK(proof.data == NULL && proof.len == 0);
  printf("roots and proofs: ok\n");
}

static void snapshots(cairn_session *s, cairn_table *t) {
  EXPECT(CAIRN_OK, cairn_snapshot_save(t, "snap-1", "v1", ERR));
  EXPECT(CAIRN_ERR_EXISTS, cairn_snapshot_save(t, "snap-1", "v1", ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_snapshot_save(t, "Bad Name", "v1", ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_snapshot_save(t, NULL, "v1", ERR));
  cairn_table *copy = NULL;
  EXPECT(CAIRN_ERR_LABEL_MISMATCH, cairn_snapshot_open(s, "snap-1", "v2", &copy, ERR));
  EXPECT(CAIRN_ERR_NOT_FOUND, cairn_snapshot_open(s, "no-such", "v1", &copy, ERR));
  EXPECT(CAIRN_OK, cairn_snapshot_open(s, "snap-1", "v1", &copy, ERR));
  const char *ask[] = {"bob"};
  flat q = flat_of(ask, 1);
  cairn_values got;
  EXPECT(CAIRN_OK, cairn_lookups(copy, q.bytes, q.lens, 1, &got, ERR));
  CHECK(value_is(&got, 0, "250"));
  cairn_values_free(&got);
  /* A table opened from a snapshot is not durable. */
  uint8_t kinds[] = {CAIRN_UPDATE_DELETE};
  size_t zero = 0;
  cairn_durability *d = NULL;
  EXPECT(CAIRN_ERR_NOT_DURABLE, cairn_write(copy, kinds, q.bytes, q.lens, NULL, &zero, 1, &d,
                                            ERR));
  EXPECT(CAIRN_OK, cairn_updates(copy, kinds, q.bytes, q.lens, NULL, &zero, 1, ERR));
  cairn_table_free(copy);
  EXPECT(CAIRN_OK, cairn_session_checkpoint(s, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_session_checkpoint(NULL, ERR));
  printf("snapshots and checkpoints: ok\n");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_cairn DIR\n");
    return 2;
  }
  const char *dir = argv[1];
  errors_and_names(dir);

  cairn_session *s = NULL, *again = NULL;
  EXPECT(CAIRN_OK, cairn_session_open(dir, false, &s, ERR));
  EXPECT(CAIRN_ERR_LOCKED, cairn_session_open(dir, false, &again, ERR));
  cairn_table *t = NULL, *plain = NULL, *bad = NULL;
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_table_open(s, "Bad Name!", CAIRN_AUTH_NONE, &bad,
                                                      ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_table_open(s, "accounts", 7, &bad, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_table_open(s, NULL, CAIRN_AUTH_NONE, &bad, ERR));
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_table_open(NULL, "x", CAIRN_AUTH_NONE, &bad, ERR));
  EXPECT(CAIRN_OK, cairn_table_open(s, "accounts", CAIRN_AUTH_SHA256, &t, ERR));
  EXPECT(CAIRN_OK, cairn_table_open(s, "plain", CAIRN_AUTH_NONE, &plain, ERR));
  /* An existing table keeps its authentication. */
  EXPECT(CAIRN_ERR_INVALID_ARGUMENT, cairn_table_open(s, "accounts", CAIRN_AUTH_BLAKE3, &bad,
                                                      ERR));
  CHECK(bad == NULL);
  printf("sessions and tables: ok\n");

  updates_and_lookups(t);
  durable_write(t);
  cursors(t);
  roots_and_proofs(t, plain);
  snapshots(s, t);

  /* Closing the session closes its tables; their handles are still freed. */
  cairn_session_close(s);
  cairn_values got;
  const char *ask[] = {"alice"};
  flat q = flat_of(ask, 1);
  EXPECT(CAIRN_ERR_CLOSED, cairn_lookups(t, q.bytes, q.lens, 1, &got, ERR));
  cairn_table_free(t);
  cairn_table_free(plain);

  /* Read-only: no durable table, no checkpoint; snapshots open. */
  EXPECT(CAIRN_OK, cairn_session_open(dir, true, &s, ERR));
  EXPECT(CAIRN_ERR_READ_ONLY, cairn_table_open(s, "accounts", CAIRN_AUTH_SHA256, &t, ERR));
  EXPECT(CAIRN_ERR_READ_ONLY, cairn_session_checkpoint(s, ERR));
  cairn_table *copy = NULL;
  EXPECT(CAIRN_OK, cairn_snapshot_open(s, "snap-1", "v1", &copy, ERR));
  cairn_table_free(copy);
  cairn_session_free(s);
  printf("read-only session: ok\n");

  /* Reopened: the durable table recovered, the write and the delete in it. */
  EXPECT(CAIRN_OK, cairn_session_open(dir, false, &s, ERR));
  EXPECT(CAIRN_OK, cairn_table_open(s, "accounts", CAIRN_AUTH_SHA256, &t, ERR));
  const char *all[] = {"alice", "bob", "carol"};
  q = flat_of(all, 3);
  EXPECT(CAIRN_OK, cairn_lookups(t, q.bytes, q.lens, 3, &got, ERR));
  CHECK(value_is(&got, 0, "100") && value_is(&got, 1, "250") && got.found[2] == 0);
  cairn_values_free(&got);
  cairn_table_free(t);
  cairn_session_close(s);
  printf("recovery: ok\n");

  if (failures > 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
