{ ShoalMM — shoal as the Free Pascal memory manager.

  Put it first in the program's uses clause:

      uses ShoalMM, cthreads, SysUtils, Classes;

  and build with  fpc -Fu<shoal>/pascal -Fl<shoal build dir> prog.pas
  (libshoal.a is linked in; -dSHOAL_SHARED links libshoal.so instead).

  What this unit owns
    Its initialization installs shoal behind every field of FPC 3.2's
    TMemoryManager. Each field is a Pascal-convention wrapper around the
    cdecl C API of include/shoal.h; the wrappers keep the RTL's semantics
    (see the table below) and add nothing on the common path but one
    shoal_owns lookup where a pointer may not be shoal's.

  Invariants
    - Blocks handed out come from shoal only (16-byte aligned).
    - A pointer the previous manager handed out before ShoalMM took over
      (the System and unix units allocate early, see PASCAL.md) is never given
      to shoal: FreeMem, FreeMemSize, ReAllocMem and MemSize test shoal_owns
      and pass such a pointer to the saved previous manager. ReAllocMem moves
      a foreign block into shoal, so foreign blocks only ever go away.
    - The previous manager is not restored at finalization: units finalized
      after this one still free through the manager in force.
    - A manager installed before this unit (heaptrc from -gh, cmem) is kept,
      with one line on stderr saying so; ShoalActive then returns False.

  Semantics kept (RTL heap.inc, FPC 3.2.2)
    GetMem(0)            a valid, unique block
    FreeMem(nil)         0, nothing done
    FreeMemSize(p, 0)    0, nothing freed (as SysFreeMemSize)
    FreeMemSize(p, n)    frees p; n is not checked: the default heap
                         disregards it as the Programmer's Guide allows
    AllocMem(n)          zeroed
    ReAllocMem(p, 0)     frees p, p := nil, returns nil
    ReAllocMem(nil, n)   allocates
    ReAllocMem failure   old block freed, p := nil (as SysReAllocMem) when
                         ReturnNilIfGrowHeapFails, else run-time error 203
    MemSize(p)           usable size (>= requested); MemSize(nil) = 0
    out of memory        run-time error 203 unless ReturnNilIfGrowHeapFails
}
unit ShoalMM;

{$mode fpc}
{$modeswitch result}
{$modeswitch out}
{$inline on}

interface

type
  { Mirrors shoal_class_stats_t: one size class, or the large or huge blocks. }
  TShoalClassStats = record
    BlockSize: PtrUInt;             { bytes per block; 0 for large and huge blocks }
    Allocated: PtrUInt;             { blocks handed out, cumulative }
    Freed: PtrUInt;                 { blocks freed, cumulative }
    Live: PtrUInt;                  { Allocated - Freed }
  end;

  { Mirrors shoal_stats_t field for field (size_t = PtrUInt). }
  TShoalStats = record
    LiveBlocks: PtrUInt;            { blocks handed out and not yet freed }
    LiveBytes: PtrUInt;             { sum of their usable sizes }
    OsReservedBytes: PtrUInt;       { address space held from the OS }
    OsCommittedBytes: PtrUInt;      { of it, memory that may be resident }
    OsPeakCommittedBytes: PtrUInt;
    Segments: PtrUInt;              { segments in use }
    Pages: PtrUInt;                 { pages in use }
    HugeBlocks: PtrUInt;            { blocks with a mapping of their own }
    Heaps: PtrUInt;                 { thread heaps ever created }
    HeapsAbandoned: PtrUInt;        { heaps of exited threads awaiting adoption }
    RemoteFrees: PtrUInt;           { frees of blocks owned by another thread }
    Purges: PtrUInt;                { ranges given back to the OS }
    PurgedBytes: PtrUInt;
    PurgeDelayMs: PtrUInt;          { purge delay in force (ms): soPurgeDelay, or longer }
    SlowPaths: PtrUInt;             { mallocs that found no block at hand, or large ones }
    AllocatedBlocks: PtrUInt;       { blocks handed out, cumulative }
    FreedBlocks: PtrUInt;           { blocks freed, cumulative }
    OutsizedLiveBytes: PtrUInt;     { of LiveBytes, in large and huge blocks }
    CountersEnabled: PtrUInt;       { 0: built with SHOAL_STATISTICS=OFF, counted figures read 0 }
    Classes: array[0..71] of TShoalClassStats; { SHOAL_STATS_SIZE_CLASSES, smallest first }
    Large: TShoalClassStats;        { over 32 KiB up to 960 KiB }
    Huge: TShoalClassStats;         { over 960 KiB }
  end;

  { Mirrors shoal_option_t, in order. Each is also read once from the
    environment as SHOAL_<NAME> (SHOAL_PURGE_DELAY, SHOAL_VERBOSE, ...). }
  TShoalOption = (
    soPurgeDelay,     { ms before an emptied page is purged }
    soPurgeLimit,     { bytes of free dirty memory a thread keeps }
    soHugeCache,      { bytes of freed huge blocks kept mapped }
    soAbortOnError,   { 1: abort on a bad free; 0: warn, ignore }
    soVerbose,        { 1: say what shoal decides on stderr }
    soReallocGrowth,  { 1: over-allocate on realloc growth }
    soLeaksSample,    { SHOAL_LEAKS: one sample per this many bytes }
    soCheckQuarantine, { SHOAL_CHECK: bytes of freed blocks held back }
    soHugePages,      { 1: back huge blocks with transparent huge pages }
    soMediumPool      { plain blocks from a coalescing pool: 0, 1 (1-32 KiB), 2 }
  );

{ True when this unit installed shoal as the memory manager. }
function ShoalActive: Boolean;
{ Process-wide figures (shoal_stats_get). }
function ShoalStats: TShoalStats;
{ Collect blocks freed by other threads into this thread's heap; with Force,
  also purge free pages now instead of after SHOAL_PURGE_DELAY. }
procedure ShoalCollect(Force: Boolean);
{ True when p lies in memory shoal manages. }
function ShoalOwns(p: Pointer): Boolean;
{ Checked mode (SHOAL_CHECK=1): verify every block's guard bytes and every
  freed block's fill now; each fault is reported on stderr (then abort,
  unless SHOAL_ABORT_ON_ERROR=0). Returns the faults found; 0 outside
  checked mode. }
function ShoalCheckHeap: PtrUInt;
function ShoalOptionGet(Option: TShoalOption): PtrInt;
procedure ShoalOptionSet(Option: TShoalOption; Value: PtrInt);
{ The manager that was in force before ShoalMM (it still owns the blocks it
  handed out before). }
procedure ShoalPreviousManager(out Manager: TMemoryManager);

{ Delphi's and FastMM's switch (FPC's System unit has none): set it to True,
  first thing in the program, and every block allocated from then on and
  still allocated at exit is reported, by call stack, by size and by what it
  holds ("TStringList x 3, AnsiString x 5"), in the report file (below) with
  its first lines on stderr. Threads started before it are not tracked.
  False again: no report at exit. SHOAL_LEAKS=all does the same from start. }
function GetReportMemoryLeaksOnShutdown: Boolean;
procedure SetReportMemoryLeaksOnShutdown(Value: Boolean);
property ReportMemoryLeaksOnShutdown: Boolean
  read GetReportMemoryLeaksOnShutdown write SetReportMemoryLeaksOnShutdown;

{ Where the reports (leaks, contention, checked mode) go: a path, 'auto'
  (<program>_shoal_report.txt beside the executable: a ShoalMM program's
  default, unless SHOAL_REPORT_FILE is set) or '' for stderr only. False
  once a report has been written. }
function ShoalReportFile(const Path: AnsiString): Boolean;

implementation

{$ifdef MSWINDOWS}
  { Win64: the core's COFF objects in libshoal_fpc.a (make windows builds
    it), linked by FPC's internal linker; they call kernel32 and msvcrt,
    both part of Windows, through MinGW's import libraries copied beside it
    (-Fl the Win64 build folder). Nothing to ship beside the program. }
  {$linklib shoal_fpc}
  {$linklib msvcrt}       { before kernel32: its static members call kernel32 }
  {$linklib kernel32}
{$else}
{$ifdef SHOAL_SHARED}
  {$linklib shoal}        { -lshoal: libshoal.so from the -Fl directory }
{$else}
  {$linklib libshoal.a}   { the archive itself, even beside libshoal.so }
  {$linklib pthread}
{$endif}
{$linklib c}              { libc start-up: ELF TLS for shoal's _Thread_local }
{$endif}

{ ---- the C API (cdecl), include/shoal.h ---- }

function shoal_malloc(size: PtrUInt): Pointer; cdecl; external name 'shoal_malloc';
function shoal_calloc(count, size: PtrUInt): Pointer; cdecl; external name 'shoal_calloc';
function shoal_realloc(p: Pointer; size: PtrUInt): Pointer; cdecl; external name 'shoal_realloc';
procedure shoal_free(p: Pointer); cdecl; external name 'shoal_free';
function shoal_malloc_usable_size(p: Pointer): PtrUInt; cdecl; external name 'shoal_malloc_usable_size';
function shoal_owns(p: Pointer): Boolean; cdecl; external name 'shoal_owns';
function shoal_block_size(p: Pointer): PtrUInt; cdecl; external name 'shoal_block_size';
procedure shoal_collect(force: Boolean); cdecl; external name 'shoal_collect';
function shoal_check_heap: PtrUInt; cdecl; external name 'shoal_check_heap';
procedure shoal_stats_get(out stats: TShoalStats); cdecl; external name 'shoal_stats_get';
function shoal_option_get(option: LongInt): PtrInt; cdecl; external name 'shoal_option_get';
{$ifdef MSWINDOWS}
{ The reports at exit (SHOAL_STATS, SHOAL_LEAKS, ...), which C destructors
  make on Linux; a Free Pascal program on Windows runs none: see finalization. }
procedure api_exit_reports; cdecl; external name 'api_exit_reports';
{$endif}
procedure shoal_option_set(option: LongInt; value: PtrInt); cdecl; external name 'shoal_option_set';
function shoal_report_file(path: PAnsiChar): Boolean; cdecl; external name 'shoal_report_file';
function shoal_leak_report_at_exit(on: Boolean): Boolean; cdecl; external name 'shoal_leak_report_at_exit';
type
  TShoalBlockNamer = function(block: Pointer; size: PtrUInt; name: PAnsiChar;
    capacity: PtrUInt): PtrUInt; cdecl;
procedure shoal_report_namer(namer: TShoalBlockNamer); cdecl; external name 'shoal_report_namer';
function shoal_read_memory(address: Pointer; out_: Pointer; size: PtrUInt): Boolean; cdecl;
  external name 'shoal_read_memory';
function c_getenv(name: PAnsiChar): PAnsiChar; cdecl; external name 'getenv';

var
  PreviousManager: TMemoryManager;
  Installed: Boolean = False;
  { shoal keeps no peak of live bytes: the highest seen by GetFPCHeapStatus
    (a racy max between threads; a missed update only under-reports). }
  MaxLiveBytesSeen: PtrUInt = 0;

{ ---- out of memory ---- }

{ The RTL's own error entry (system.inc): unlike RunError it goes through
  ErrorProc, so SysUtils turns 203 into EOutOfMemory as for the default heap. }
procedure HandleError(Errno: LongInt); external name 'FPC_HANDLEERROR';

{ The RTL's rule: nil when ReturnNilIfGrowHeapFails, else run-time error
  203 (EOutOfMemory once SysUtils is in). }
function OutOfMemory: Pointer;
begin
  if not ReturnNilIfGrowHeapFails then
    HandleError(203);
  Result := nil;
end;

{ ---- the TMemoryManager fields ---- }

function ShoalGetMem(Size: PtrUInt): Pointer;
begin
  Result := shoal_malloc(Size);
  if Result = nil then
    Result := OutOfMemory;
end;

function ShoalFreeMem(p: Pointer): PtrUInt;
begin
  if p = nil then
    exit(0);
  Result := shoal_block_size(p); { one lookup: 0 when not shoal's }
  if Result = 0 then
    exit(PreviousManager.FreeMem(p));
  shoal_free(p);
end;

function ShoalFreeMemSize(p: Pointer; Size: PtrUInt): PtrUInt;
begin
  if (Size = 0) or (p = nil) then
    exit(0);
  Result := shoal_block_size(p);
  if Result = 0 then
    exit(PreviousManager.FreeMemSize(p, Size));
  shoal_free(p);
end;

function ShoalAllocMem(Size: PtrUInt): Pointer;
begin
  Result := shoal_calloc(1, Size);
  if Result = nil then
    Result := OutOfMemory;
end;

function ShoalMemSize(p: Pointer): PtrUInt;
begin
  if p = nil then
    exit(0);
  Result := shoal_block_size(p);
  if Result = 0 then
    exit(PreviousManager.MemSize(p));
end;

{ A block the previous manager handed out moves into shoal. }
function MoveForeignBlock(var p: Pointer; Size: PtrUInt): Pointer;
var
  OldSize: PtrUInt;
begin
  Result := shoal_malloc(Size);
  if Result <> nil then
  begin
    OldSize := PreviousManager.MemSize(p);
    if OldSize > Size then
      OldSize := Size;
    Move(p^, Result^, OldSize);
  end;
  PreviousManager.FreeMem(p);
  p := Result;
  if Result = nil then
    Result := OutOfMemory;
end;

function ShoalReAllocMem(var p: Pointer; Size: PtrUInt): Pointer;
begin
  if Size = 0 then
  begin
    if p <> nil then
      ShoalFreeMem(p);
    p := nil;
    exit(nil);
  end;
  if p = nil then
  begin
    p := ShoalGetMem(Size);
    exit(p);
  end;
  if not shoal_owns(p) then
    exit(MoveForeignBlock(p, Size));
  Result := shoal_realloc(p, Size);
  if Result = nil then
  begin
    { shoal_realloc left the old block intact; the RTL frees it. }
    shoal_free(p);
    p := nil;
    exit(OutOfMemory);
  end;
  p := Result;
end;

procedure ShoalInitThread;
begin
  { shoal makes a thread's heap at its first allocation. }
  if PreviousManager.InitThread <> nil then
    PreviousManager.InitThread();
end;

procedure ShoalDoneThread;
begin
  { shoal parks the heap of an exiting thread itself (pthread key). }
  if PreviousManager.DoneThread <> nil then
    PreviousManager.DoneThread();
end;

procedure ShoalRelocateHeap;
begin
  if PreviousManager.RelocateHeap <> nil then
    PreviousManager.RelocateHeap();
end;

function ClampCardinal(Value: PtrUInt): Cardinal; inline;
begin
  if Value > High(Cardinal) then
    Result := High(Cardinal)
  else
    Result := Value;
end;

function ShoalGetFPCHeapStatus: TFPCHeapStatus;
var
  Stats: TShoalStats;
begin
  shoal_stats_get(Stats);
  if Stats.LiveBytes > MaxLiveBytesSeen then
    MaxLiveBytesSeen := Stats.LiveBytes;
  Result.MaxHeapSize := Stats.OsPeakCommittedBytes;
  Result.MaxHeapUsed := MaxLiveBytesSeen;
  Result.CurrHeapSize := Stats.OsCommittedBytes;
  Result.CurrHeapUsed := Stats.LiveBytes;
  if Stats.OsCommittedBytes > Stats.LiveBytes then
    Result.CurrHeapFree := Stats.OsCommittedBytes - Stats.LiveBytes
  else
    Result.CurrHeapFree := 0;
end;

function ShoalGetHeapStatus: THeapStatus;
var
  Stats: TShoalStats;
begin
  shoal_stats_get(Stats);
  Result := Default(THeapStatus);
  Result.TotalAddrSpace := ClampCardinal(Stats.OsReservedBytes);
  if Stats.OsReservedBytes > Stats.OsCommittedBytes then
    Result.TotalUncommitted := ClampCardinal(Stats.OsReservedBytes - Stats.OsCommittedBytes);
  Result.TotalCommitted := ClampCardinal(Stats.OsCommittedBytes);
  Result.TotalAllocated := ClampCardinal(Stats.LiveBytes);
  if Stats.OsCommittedBytes > Stats.LiveBytes then
    Result.TotalFree := ClampCardinal(Stats.OsCommittedBytes - Stats.LiveBytes);
end;

const
  ShoalManager: TMemoryManager = (
    NeedLock: False;
    GetMem: @ShoalGetMem;
    FreeMem: @ShoalFreeMem;
    FreeMemSize: @ShoalFreeMemSize;
    AllocMem: @ShoalAllocMem;
    ReAllocMem: @ShoalReAllocMem;
    MemSize: @ShoalMemSize;
    InitThread: @ShoalInitThread;
    DoneThread: @ShoalDoneThread;
    RelocateHeap: @ShoalRelocateHeap;
    GetHeapStatus: @ShoalGetHeapStatus;
    GetFPCHeapStatus: @ShoalGetFPCHeapStatus;
  );

{ ---- the Pascal API ---- }

function ShoalActive: Boolean;
begin
  Result := Installed;
end;

function ShoalStats: TShoalStats;
begin
  shoal_stats_get(Result);
end;

procedure ShoalCollect(Force: Boolean);
begin
  shoal_collect(Force);
end;

function ShoalCheckHeap: PtrUInt;
begin
  Result := shoal_check_heap;
end;

function ShoalOwns(p: Pointer): Boolean;
begin
  Result := shoal_owns(p);
end;

function ShoalOptionGet(Option: TShoalOption): PtrInt;
begin
  Result := shoal_option_get(Ord(Option));
end;

procedure ShoalOptionSet(Option: TShoalOption; Value: PtrInt);
begin
  shoal_option_set(Ord(Option), Value);
end;

procedure ShoalPreviousManager(out Manager: TMemoryManager);
begin
  Manager := PreviousManager;
end;

{ ---- reports ---- }

var
  LeakReportWanted: Boolean = False;

function GetReportMemoryLeaksOnShutdown: Boolean;
begin
  Result := LeakReportWanted;
end;

procedure SetReportMemoryLeaksOnShutdown(Value: Boolean);
begin
  if Installed and shoal_leak_report_at_exit(Value) then
    LeakReportWanted := Value;
end;

function ShoalReportFile(const Path: AnsiString): Boolean;
begin
  if Path = '' then
    Result := shoal_report_file(nil)
  else
    Result := shoal_report_file(PAnsiChar(Path));
end;

{ What a leaked block holds, for the leak report: an object (its class
  name), a string, a dynamic array. Layouts of FPC 3.2 (rtl/inc: objpash.inc,
  astrings.inc, ustrings.inc, dynarr.inc); every word taken from memory the
  block points to is read through shoal_read_memory, so a block of plain
  data that only looks like an object cannot fault. }
type
  TStringHeader = record { TAnsiRec and TUnicodeRec }
    CodePage: Word;
    ElementSize: Word;
{$ifdef CPU64}
    Dummy: DWord;
{$endif}
    Ref: SizeInt;
    Len: SizeInt;
  end;
  PStringHeader = ^TStringHeader;
  TDynArrayHeader = packed record
    RefCount: PtrInt;
    High: SizeInt;
  end;
  PDynArrayHeader = ^TDynArrayHeader;
  TVmtHead = record { vmtInstanceSize, vmtInstanceSizeNeg, vmtParent, vmtClassName }
    InstanceSize: SizeInt;
    InstanceSizeNeg: SizeInt;
    Parent: Pointer;
    ClassName: PShortString;
  end;

function NameOut(const Text: ShortString; Name: PAnsiChar; Capacity: PtrUInt): PtrUInt;
begin
  Result := Length(Text);
  if Result + 1 > Capacity then
    exit(0);
  Move(Text[1], Name^, Result);
  Name[Result] := #0;
end;

function IsIdentifier(const Text: ShortString): Boolean;
var
  i: Integer;
begin
  Result := Length(Text) > 0;
  for i := 1 to Length(Text) do
    if not (Text[i] in ['A'..'Z', 'a'..'z', '0'..'9', '_', '.', '<', '>', ',']) then
      exit(False);
end;

function ClassNameOf(Block: Pointer; Size: PtrUInt; out Text: ShortString): Boolean;
var
  Vmt: TVmtHead;
  NameLength: Byte;
begin
  Result := False;
  if (Size < SizeOf(Pointer)) or
    not shoal_read_memory(PPointer(Block)^, @Vmt, SizeOf(Vmt)) then
    exit;
  if (Vmt.InstanceSize <= 0) or (Vmt.InstanceSize <> -Vmt.InstanceSizeNeg) or
    (PtrUInt(Vmt.InstanceSize) > Size) or
    not shoal_read_memory(Vmt.ClassName, @NameLength, 1) or (NameLength = 0) or
    not shoal_read_memory(Vmt.ClassName, @Text, NameLength + 1) then
    exit;
  Result := IsIdentifier(Text);
end;

function StringKindOf(Block: Pointer; Size: PtrUInt; out Text: ShortString): Boolean;
var
  Header: PStringHeader;
  Bytes: PtrUInt;
begin
  Result := False;
  if Size < SizeOf(TStringHeader) + 1 then
    exit;
  Header := PStringHeader(Block);
  if (Header^.Ref < 1) or (Header^.Len < 0) or
    not (Header^.ElementSize in [1, 2]) then
    exit;
  Bytes := PtrUInt(Header^.Len + 1) * Header^.ElementSize; { the text and its #0 }
  if SizeOf(TStringHeader) + Bytes > Size then
    exit;
  if Header^.ElementSize = 1 then
  begin
    if PByte(Block)[SizeOf(TStringHeader) + Header^.Len] <> 0 then
      exit;
    Text := 'AnsiString';
  end
  else
  begin
    if PWord(PByte(Block) + SizeOf(TStringHeader))[Header^.Len] <> 0 then
      exit;
    Text := 'UnicodeString';
  end;
  Result := True;
end;

{ A dynamic array is refcount, high, then (high + 1) elements; GetMem asked
  for exactly that, so the element size must divide what is left. }
function IsDynArray(Block: Pointer; Size: PtrUInt): Boolean;
var
  Header: PDynArrayHeader;
  Elements, ElementSize: PtrUInt;
begin
  Result := False;
  if Size <= SizeOf(TDynArrayHeader) then
    exit;
  Header := PDynArrayHeader(Block);
  if (Header^.RefCount < 1) or (Header^.RefCount > 1 shl 20) or (Header^.High < 0) then
    exit;
  Elements := PtrUInt(Header^.High) + 1;
  ElementSize := (Size - SizeOf(TDynArrayHeader)) div Elements;
  Result := (ElementSize > 0) and (ElementSize <= 4096) and
    (ElementSize * Elements = Size - SizeOf(TDynArrayHeader));
end;

function NameBlock(Block: Pointer; Size: PtrUInt; Name: PAnsiChar;
  Capacity: PtrUInt): PtrUInt; cdecl;
var
  Text: ShortString;
begin
  if ClassNameOf(Block, Size, Text) or StringKindOf(Block, Size, Text) then
    exit(NameOut(Text, Name, Capacity));
  if IsDynArray(Block, Size) then
    exit(NameOut('dynamic array', Name, Capacity));
  Result := 0;
end;

{ ---- installation ---- }

{ heaptrc (-gh) chains every thread hook; cmem sets none. }
function IsHeaptrc(const Manager: TMemoryManager): Boolean;
begin
  Result := (Manager.DoneThread <> nil) and (Manager.RelocateHeap <> nil);
end;

initialization
  PreviousManager := Default(TMemoryManager);
  GetMemoryManager(PreviousManager);
  if not IsMemoryManagerSet then
  begin
    SetMemoryManager(ShoalManager);
    Installed := True;
    shoal_report_namer(@NameBlock);
    if c_getenv('SHOAL_REPORT_FILE') = nil then
      shoal_report_file('auto');
  end
  else if IsHeaptrc(PreviousManager) then
    Writeln(StdErr, 'ShoalMM: heaptrc (-gh) is the memory manager; keeping it for its ',
      'leak report, shoal is not used (build without -gh to use shoal)')
  else
    Writeln(StdErr, 'ShoalMM: another memory manager (cmem?) was installed first; keeping it, ',
      'shoal is not used (remove it from uses, list ShoalMM first)');
  Flush(StdErr);

finalization
  { The last unit finalized before System's, ShoalMM being the first in
    uses: what is still allocated now is what the program leaked. }
  {$ifdef MSWINDOWS}
  if Installed then
    api_exit_reports;
  {$endif}
end.
