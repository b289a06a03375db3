/* purge_methods.c — which way of giving pages back suits shoal on Windows:
 * MEM_RESET, DiscardVirtualMemory, or decommit and commit again. For each,
 * 64 MiB are written, given back, and written again: the working set after
 * the purge (does the memory leave?), the purge's time, the rewrite's time
 * (what refaulting costs) and whether the range read as zero after it.
 * Built by bench/windows/run.sh and run under Wine (or on Windows). */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <psapi.h>
#include <stdio.h>
#include <string.h>

enum { REGION = 64 << 20, PAGE = 4096, ROUNDS = 5 };

typedef DWORD(WINAPI *discard_fn)(PVOID, SIZE_T);

static double now_ms(void) {
  LARGE_INTEGER counter, frequency;
  QueryPerformanceCounter(&counter);
  QueryPerformanceFrequency(&frequency);
  return (double)counter.QuadPart * 1000.0 / (double)frequency.QuadPart;
}

static double working_set_mib(void) {
  PROCESS_MEMORY_COUNTERS counters;
  K32GetProcessMemoryInfo(GetCurrentProcess(), &counters, sizeof counters);
  return (double)counters.WorkingSetSize / (1 << 20);
}

static void touch(unsigned char *region, unsigned char value) {
  for (size_t i = 0; i < REGION; i += PAGE) region[i] = value;
}

static int reads_zero(const unsigned char *region) {
  for (size_t i = 0; i < REGION; i += PAGE)
    if (region[i] != 0) return 0;
  return 1;
}

int main(void) {
  discard_fn discard = (discard_fn)(void (*)(void))GetProcAddress(
      GetModuleHandleA("kernelbase.dll"), "DiscardVirtualMemory");
  const char *names[] = {"MEM_RESET", "DiscardVirtualMemory", "decommit + commit"};
  printf("| method | working set before, MiB | after purge, MiB | purge, ms | rewrite after purge, "
         "ms | first write, ms | reads zero after |\n");
  printf("|---|---:|---:|---:|---:|---:|---|\n");
  for (int method = 0; method < 3; method++) {
    if (method == 1 && discard == NULL) {
      printf("| %s | | | | | | not in this system |\n", names[method]);
      continue;
    }
    double before = 0, after = 0, purge = 0, rewrite = 0, first = 0;
    int zero = 1;
    for (int round = 0; round < ROUNDS; round++) {
      unsigned char *region = VirtualAlloc(NULL, REGION, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
      double t0 = now_ms();
      touch(region, 1);
      first += now_ms() - t0;
      before += working_set_mib();
      t0 = now_ms();
      if (method == 0)
        VirtualAlloc(region, REGION, MEM_RESET, PAGE_READWRITE);
      else if (method == 1)
        discard(region, REGION);
      else {
        VirtualFree(region, REGION, MEM_DECOMMIT);
        VirtualAlloc(region, REGION, MEM_COMMIT, PAGE_READWRITE);
      }
      purge += now_ms() - t0;
      after += working_set_mib();
      zero &= reads_zero(region);
      t0 = now_ms();
      touch(region, 2);
      rewrite += now_ms() - t0;
      VirtualFree(region, 0, MEM_RELEASE);
    }
    printf("| %s | %.1f | %.1f | %.2f | %.2f | %.2f | %s |\n", names[method], before / ROUNDS,
           after / ROUNDS, purge / ROUNDS, rewrite / ROUNDS, first / ROUNDS, zero ? "yes" : "no");
  }
  return 0;
}
