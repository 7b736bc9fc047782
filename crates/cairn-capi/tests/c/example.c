#include <stdio.h>
#include "cairn.h"

int main(void) {
  cairn_session *session;
  cairn_table *accounts;
  cairn_error *err = NULL;
  if (cairn_session_open("example-db", false, &session, &err) != CAIRN_OK ||
      cairn_table_open(session, "accounts", CAIRN_AUTH_SHA256, &accounts, &err) != CAIRN_OK) {
    fprintf(stderr, "cairn: %s\n", cairn_error_message(err));
    cairn_error_free(err);
    return 1;
  }
  /* Two inserts in one batch: keys and values end to end, with their lengths. (Each call
   * returns a code; checked above, left unchecked below for brevity.) */
  uint8_t kinds[] = {CAIRN_UPDATE_INSERT, CAIRN_UPDATE_INSERT};
  size_t key_lens[] = {5, 3}, value_lens[] = {3, 2};
  cairn_durability *durability;
  cairn_write(accounts, kinds, (const uint8_t *)"alicebob", key_lens,
              (const uint8_t *)"10020", value_lens, 2, &durability, NULL);
  cairn_durability_wait(durability, NULL); /* on disk */
  cairn_durability_free(durability);
  cairn_values found;
  cairn_lookups(accounts, (const uint8_t *)"alicebob", key_lens, 2, &found, NULL);
  printf("bob has %.*s\n", (int)(found.offsets[2] - found.offsets[1]),
         (const char *)found.data + found.offsets[1]);
  cairn_values_free(&found);
  cairn_table_free(accounts);
  cairn_session_close(session);
  return 0;
}
