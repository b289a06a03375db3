{ test_active — the manager in force is shoal's: the RTL's record points at
  ShoalMM, shoal's statistics move with GetMem/FreeMem, every kind of Pascal
  heap data lies in shoal's memory, and SHOAL_* environment variables and the
  options API work as for C, and TShoalStats/TShoalOption match shoal.h.

  run-env: SHOAL_PURGE_DELAY=37 }
program test_active;

{$mode objfpc}{$H+}

uses
  ShoalMM, {$ifdef unix} cthreads, {$endif} SysUtils, Classes;

{$i check.inc}

type
  TRec = record
    Name: string;
    Value: Int64;
  end;
  PRec = ^TRec;

procedure TestManagerInForce;
var
  Current, Previous: TMemoryManager;
begin
  Check(ShoalActive, 'ShoalMM did not install itself');
  Check(IsMemoryManagerSet, 'IsMemoryManagerSet is false');
  GetMemoryManager(Current);
  ShoalPreviousManager(Previous);
  Check(Pointer(Current.GetMem) <> Pointer(Previous.GetMem), 'GetMem is still the previous manager''s');
  Check(Pointer(Current.FreeMem) <> Pointer(Previous.FreeMem), 'FreeMem is still the previous manager''s');
  Check(Current.GetHeapStatus <> nil, 'GetHeapStatus is not set');
  Check(Current.GetFPCHeapStatus <> nil, 'GetFPCHeapStatus is not set');
  Check(Current.DoneThread <> nil, 'DoneThread is not set');
end;

{ run_tests.sh compiles shoal.h and passes its sizes. }
procedure TestLayout;
var
  Env: string;
begin
  Env := GetEnvironmentVariable('SHOAL_C_STATS_SIZE');
  if Env <> '' then
    Check(SizeOf(TShoalStats) = StrToInt(Env),
      Format('TShoalStats has %d bytes, shoal_stats_t %s: shoal.h changed', [SizeOf(TShoalStats), Env]));
  Env := GetEnvironmentVariable('SHOAL_C_OPTION_COUNT');
  if Env <> '' then
    Check(Ord(High(TShoalOption)) + 1 = StrToInt(Env),
      Format('TShoalOption has %d values, shoal_option_t %s: shoal.h changed', [Ord(High(TShoalOption)) + 1, Env]));
end;

procedure TestStatsMove;
const
  Count = 1000;
var
  Blocks: array[1..Count] of Pointer;
  S1, S2, S3: TShoalStats;
  i: Integer;
begin
  S1 := ShoalStats;
  for i := 1 to Count do
    Blocks[i] := GetMem(100);
  S2 := ShoalStats;
  Check(S2.LiveBlocks >= S1.LiveBlocks + Count,
    Format('LiveBlocks went from %d to %d after %d GetMem', [S1.LiveBlocks, S2.LiveBlocks, Count]));
  Check(S2.LiveBytes >= S1.LiveBytes + Count * 100,
    Format('LiveBytes went from %d to %d after %d GetMem(100)', [S1.LiveBytes, S2.LiveBytes, Count]));
  Check(S2.Heaps >= 1, 'no heap counted');
  Check(S2.Segments >= 1, 'no segment counted');
  Check(S2.OsCommittedBytes > 0, 'no committed memory counted');
  for i := 1 to Count do
    FreeMem(Blocks[i]);
  S3 := ShoalStats;
  { The Format temporaries above are still alive: a few blocks of slack. }
  Check(S3.LiveBlocks <= S1.LiveBlocks + 4,
    Format('LiveBlocks went from %d to %d after freeing all', [S1.LiveBlocks, S3.LiveBlocks]));
end;

procedure TestOwnership;
var
  p: Pointer;
  r: PRec;
  s: string;
  a: array of Int64;
  L: TStringList;
  Local: Integer;
begin
  p := GetMem(10);
  Check(ShoalOwns(p), 'a GetMem block is not shoal''s');
  FreeMem(p);
  New(r);
  r^.Name := 'record ' + IntToStr(PtrUInt(r));  { a heap string, not a literal }
  Check(ShoalOwns(r), 'a New record is not shoal''s');
  Check(ShoalOwns(Pointer(r^.Name)), 'a string in a record is not shoal''s');
  Dispose(r);
  s := IntToStr(123456789) + 'abc';
  Check(ShoalOwns(Pointer(s)), 'string data is not shoal''s');
  SetLength(a, 1000);
  Check(ShoalOwns(Pointer(a)), 'dynamic array data is not shoal''s');
  SetLength(a, 100000);
  Check(ShoalOwns(Pointer(a)), 'a grown dynamic array is not shoal''s');
  L := TStringList.Create;
  L.Add(s);
  Check(ShoalOwns(L), 'a TStringList instance is not shoal''s');
  L.Free;
  Check(not ShoalOwns(@Local), 'a stack address is shoal''s');
  Check(not ShoalOwns(nil), 'nil is shoal''s');
end;

procedure TestOptions;
var
  Env: string;
  Saved: PtrInt;
begin
  Env := GetEnvironmentVariable('SHOAL_PURGE_DELAY');
  if Env <> '' then
    Check(ShoalOptionGet(soPurgeDelay) = StrToInt(Env),
      Format('SHOAL_PURGE_DELAY=%s but the option reads %d', [Env, ShoalOptionGet(soPurgeDelay)]))
  else
    Check(ShoalOptionGet(soPurgeDelay) = 10, 'the purge delay is not its default 10');
  Check(ShoalOptionGet(soAbortOnError) = 1, 'SHOAL_ABORT_ON_ERROR is not its default 1');
  Saved := ShoalOptionGet(soReallocGrowth);
  ShoalOptionSet(soReallocGrowth, 0);
  Check(ShoalOptionGet(soReallocGrowth) = 0, 'ShoalOptionSet did not take');
  ShoalOptionSet(soReallocGrowth, Saved);
end;

procedure TestCollect;
const
  Count = 256;
var
  Blocks: array[1..Count] of Pointer;
  i: Integer;
  Before, After: TShoalStats;
begin
  for i := 1 to Count do
  begin
    Blocks[i] := GetMem(32 * 1024);
    FillChar(Blocks[i]^, 32 * 1024, 1);
  end;
  for i := 1 to Count do
    FreeMem(Blocks[i]);
  Before := ShoalStats;
  ShoalCollect(True);
  After := ShoalStats;
  Check(After.OsCommittedBytes <= Before.OsCommittedBytes, 'ShoalCollect(True) committed more memory');
  Check((After.Purges > Before.Purges) or (After.OsCommittedBytes < Before.OsCommittedBytes),
    'ShoalCollect(True) gave nothing back after 8 MiB were freed');
end;

begin
  TestManagerInForce;
  TestLayout;
  TestStatsMove;
  TestOwnership;
  TestOptions;
  TestCollect;
  Writeln('ok ', ChecksRun, ' checks');
end.
