{ test_late — ShoalMM listed after units that allocate at start-up
  (cthreads, SysUtils, Classes): their blocks come from the default heap and
  must reach it again, from any thread, through ShoalMM, up to the units'
  finalization at exit. PASCAL.md asks for ShoalMM first; this is what
  happens when a user does not. }
program test_late;

{$mode objfpc}{$H+}

uses
  {$ifdef unix} cthreads, {$endif} SysUtils, Classes, ShoalMM;

{$i check.inc}

const
  Count = 2000;

var
  Foreign: array[0..Count - 1] of Pointer;

function FreeForeign(Arg: Pointer): PtrInt;
var
  i: Integer;
begin
  { Another thread frees and reallocates blocks of the previous manager. }
  for i := 0 to Count - 1 do
    if i mod 2 = 0 then
      FreeMem(Foreign[i])
    else
      ReAllocMem(Foreign[i], 300);
  Result := 0;
end;

var
  Previous: TMemoryManager;
  i: Integer;
  T: TThreadID;
  L: TStringList;
begin
  Check(ShoalActive, 'ShoalMM did not install itself after other units');
  ShoalPreviousManager(Previous);
  for i := 0 to Count - 1 do
  begin
    Foreign[i] := Previous.GetMem(50 + i mod 200);
    Check(not ShoalOwns(Foreign[i]), 'a block of the previous manager is shoal''s');
    Check(MemSize(Foreign[i]) >= PtrUInt(50 + i mod 200), 'MemSize of a foreign block is short');
  end;
  T := BeginThread(@FreeForeign, nil);
  WaitForThreadTerminate(T, 0);
  CloseThread(T);
  for i := 0 to Count - 1 do
    if i mod 2 = 1 then
    begin
      Check(ShoalOwns(Foreign[i]), 'ReAllocMem on a thread left a foreign block foreign');
      FreeMem(Foreign[i]);
    end;
  L := TStringList.Create;
  for i := 1 to 1000 do
    L.Add(IntToStr(i));
  Check(ShoalOwns(L), 'a new object is not shoal''s');
  L.Free;
  Writeln('ok ', ChecksRun, ' checks');
end.
